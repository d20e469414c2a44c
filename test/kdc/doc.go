// Package kdc runs a real MIT Kerberos KDC (krb5kdc from Debian, unpacked
// by test/kerberos/install.sh) on loopback for tests: a throwaway realm in
// a temporary directory, principals with random keys, and keytabs, so the
// Kerberos clients of gpubroker and of the Hadoop minicluster meet a KDC
// that issues real tickets rather than a stand-in.
package kdc
