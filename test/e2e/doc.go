// Package e2e runs the broker end to end on a real Kubernetes control plane
// (kube-apiserver, etcd, scheduler and controller-manager built from Go
// modules, KWOK playing the kubelets: test/k8senv), the YARN RM simulator
// over HTTP, the AWS simulator over the AWS query protocol, and a real
// PostgreSQL. It plays docs/design.md's reference scenario and measures the
// headline latency from "unschedulable" to the scale-up call.
package e2e
