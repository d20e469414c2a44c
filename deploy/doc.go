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
//   - helm/gpubroker: the Helm chart of the same objects, config from
//     values, with TLS and Kerberos values; test/helm keeps it equivalent
//     to kubernetes/.
//
// manifests_test.go applies every manifest to a real kube-apiserver
// (test/k8senv) with server-side dry run and checks the RBAC rules with
// SubjectAccessReviews (deploytest.Check, which test/helm runs on the
// chart's rendering too). The package has no product code.
package deploy
