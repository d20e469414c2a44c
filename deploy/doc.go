// Package deploy holds how gpubroker is installed, and the tests that check
// it against the real thing:
//
//   - kubernetes/: plain manifests for the broker (namespace, least-privilege
//     RBAC, Secrets, ConfigMap, a two-replica Deployment with /healthz and
//     /readyz probes, Service, PodDisruptionBudget) and the node agent
//     (DaemonSet on nodes labelled gpu.vendor=nvidia). Apply them in file
//     order: kubectl apply -f deploy/kubernetes/
//   - systemd/: units for running the agent, or the broker, next to YARN,
//     and hadoop-yarn-nodemanager.service: a NodeManager with
//     Restart=always, so a decommissioned one comes back for a hand-over.
//   - gpubroker.yaml: the sample configuration of the reference scenario,
//     also embedded in the ConfigMap.
//   - docker/Dockerfile: the broker and agent images the manifests name.
//
// kubernetes_test.go applies every manifest to a real kube-apiserver
// (test/k8senv) with server-side dry run and checks the RBAC rules with
// SubjectAccessReviews. The package has no product code.
package deploy
