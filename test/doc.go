// Package test holds gpubroker's end-to-end and integration harnesses, the
// wiring of the simulators and the benchmarks at scale. Product code never
// imports it. Subpackages give tests real components: pgtest a private
// PostgreSQL server, k8senv a real Kubernetes control plane, hadoop a real
// YARN/HDFS minicluster (kerberized too), kdc an MIT Kerberos KDC, moto an
// AWS endpoint.
package test
