package deploy_test

import (
	"testing"

	"github.com/gpubroker/gpubroker/deploy/deploytest"
)

// TestManifestsOnARealControlPlane applies every manifest of
// deploy/kubernetes to a real kube-apiserver with server-side dry run and
// checks the RBAC rules with SubjectAccessReviews (deploytest.Check says
// what exactly).
func TestManifestsOnARealControlPlane(t *testing.T) {
	objs := deploytest.Load(t, "kubernetes")
	deploytest.StartCluster(t).Check(t, objs)
}
