// Package certtest makes X.509 certificate authorities and certificates
// for tests of TLS and client-certificate authentication: real ECDSA keys
// and certificates from crypto/x509, written as PEM files where the code
// under test reads them.
package certtest
