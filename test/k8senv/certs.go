package k8senv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the file names of the certificates and keys of one cluster.
type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey, saPub string
}

// writePKI creates a CA, an API server serving certificate for loopback,
// an admin client certificate in system:masters and a service-account
// signing key, all in dir.
func writePKI(dir string) (pki, error) {
	p := pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		adminCert:  filepath.Join(dir, "admin.crt"),
		adminKey:   filepath.Join(dir, "admin.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("generate ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "k8senv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("create ca certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("parse ca certificate: %w", err)
	}
	if err := writePEM(p.caCert, "CERTIFICATE", caDER); err != nil {
		return p, err
	}
	leaf := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generate key for %s: %w", subject.CommonName, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("create certificate for %s: %w", subject.CommonName, err)
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return fmt.Errorf("marshal key for %s: %w", subject.CommonName, err)
		}
		return writePEM(keyFile, "EC PRIVATE KEY", kder)
	}
	if err := leaf(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		p.serverCert, p.serverKey); err != nil {
		return p, err
	}
	if err := leaf(3, pkix.Name{CommonName: "k8senv-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth,
		nil, nil, p.adminCert, p.adminKey); err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("generate service account key: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return p, fmt.Errorf("marshal service account key: %w", err)
	}
	if err := writePEM(p.saKey, "EC PRIVATE KEY", kder); err != nil {
		return p, err
	}
	pder, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, fmt.Errorf("marshal service account public key: %w", err)
	}
	return p, writePEM(p.saPub, "PUBLIC KEY", pder)
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
