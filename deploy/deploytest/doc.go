// Package deploytest checks gpubroker's Kubernetes objects on a real
// control plane (test/k8senv): the plain manifests of deploy/kubernetes
// (deploy's TestManifestsOnARealControlPlane) and the Helm chart's rendered
// output (test/helm) go through the same server-side dry run, Pod Security
// warnings check and SubjectAccessReviews, so the two installations cannot
// be held to different standards.
//
// Product code never imports this package; tests do.
package deploytest
