// Package helm tests the Helm chart in deploy/helm/gpubroker with a real
// Helm, built from its Go module by install.sh (pinned in tools/go.mod) and
// cached under ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/helm-<version>/bin:
//
//   - helm lint --strict and helm template succeed with the default values
//     and with TLS and Kerberos on (testdata/secure-values.yaml), and refuse
//     Kerberos without its principal or krb5.conf;
//   - the default rendering is the plain manifests of deploy/kubernetes
//     object for object (kinds and names, RBAC rules, images, args, ports,
//     mounted Secrets, the whole pod specs, the broker's configuration),
//     leaving out only the Namespace, which helm install --create-namespace
//     makes;
//   - with TLS and Kerberos on, every file the configuration and the agent's
//     flags name is mounted from the Secret or ConfigMap it must come from
//     (agents by client certificate); with TLS off, plain HTTP and tokens;
//   - both renderings pass deploytest.Check on a real kube-apiserver
//     (server-side dry run, Pod Security warnings, SubjectAccessReviews), the
//     same check as the plain manifests.
//
// The package has no product code.
package helm
