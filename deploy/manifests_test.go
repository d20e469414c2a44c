package deploy_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpubroker/gpubroker/deploy/deploytest"
)

// loadManifests decodes every object of deploy/kubernetes/*.yaml, in file
// order (the order kubectl apply -f uses).
func loadManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return deploytest.Load(t, "kubernetes")
}

func describe(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// TestManifestsOnARealControlPlane applies every manifest of
// deploy/kubernetes to a real kube-apiserver with server-side dry run and
// checks the RBAC rules with SubjectAccessReviews (deploytest.Check says
// what exactly). Every namespaced object lives in the namespace gpubroker,
// whose Pod Security level the check relies on.
func TestManifestsOnARealControlPlane(t *testing.T) {
	objs := loadManifests(t)
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && ns != "gpubroker" {
			t.Errorf("%s is outside the namespace gpubroker", describe(o))
		}
	}
	deploytest.StartCluster(t).Check(t, objs)
}
