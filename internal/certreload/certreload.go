package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/gpubroker/gpubroker/broker"
)

// Config names the files. CertFile and KeyFile are required; with
// ClientCAFile, a server asks clients for certificates signed by those CAs
// (and verifies any it is given).
type Config struct {
	CertFile, KeyFile, ClientCAFile string
	// Logger receives a warning when changed files do not load (default:
	// discard).
	Logger *slog.Logger
}

// Reloader holds the loaded files and reloads them when they change.
type Reloader struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	stamps []os.FileInfo
	failed bool // the files changed and did not load; warned once
	cert   *tls.Certificate
	server *tls.Config
}

// New loads the files. Its errors are validation errors naming the field
// (cert_file, key_file, client_ca_file) and what is wrong.
func New(cfg Config) (*Reloader, error) {
	switch {
	case cfg.CertFile == "" && cfg.KeyFile != "":
		return nil, broker.Invalid("cert_file", "is required with key_file: name the PEM certificate the key belongs to")
	case cfg.CertFile != "" && cfg.KeyFile == "":
		return nil, broker.Invalid("key_file", "is required with cert_file: name the certificate's PEM private key")
	case cfg.CertFile == "":
		return nil, broker.Invalid("cert_file", "is required: name the PEM certificate to serve")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{cfg: cfg, log: cfg.Logger}
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamps); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) files() []struct{ field, path string } {
	fs := []struct{ field, path string }{{"cert_file", r.cfg.CertFile}, {"key_file", r.cfg.KeyFile}}
	if r.cfg.ClientCAFile != "" {
		fs = append(fs, struct{ field, path string }{"client_ca_file", r.cfg.ClientCAFile})
	}
	return fs
}

func (r *Reloader) stat() ([]os.FileInfo, error) {
	var out []os.FileInfo
	for _, f := range r.files() {
		fi, err := os.Stat(f.path)
		if err != nil {
			return nil, broker.Invalid(f.field, "cannot be read: %s", err)
		}
		out = append(out, fi)
	}
	return out, nil
}

// load reads the files and, when they are good, makes them current.
func (r *Reloader) load(stamps []os.FileInfo) error {
	certPEM, err := os.ReadFile(r.cfg.CertFile)
	if err != nil {
		return broker.Invalid("cert_file", "cannot be read: %s", err)
	}
	keyPEM, err := os.ReadFile(r.cfg.KeyFile)
	if err != nil {
		return broker.Invalid("key_file", "cannot be read: %s", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return broker.Invalid("key_file", "does not load with cert_file %s (both PEM, the key the certificate's): %s", r.cfg.CertFile, err)
	}
	sc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		NextProtos: []string{"h2", "http/1.1"}}
	if r.cfg.ClientCAFile != "" {
		caPEM, err := os.ReadFile(r.cfg.ClientCAFile)
		if err != nil {
			return broker.Invalid("client_ca_file", "cannot be read: %s", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return broker.Invalid("client_ca_file", "%s holds no PEM certificate", r.cfg.ClientCAFile)
		}
		// Tokens still work without a certificate; a certificate that is
		// given must verify.
		sc.ClientCAs, sc.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	r.mu.Lock()
	r.stamps, r.cert, r.server, r.failed = stamps, &cert, sc, false
	r.mu.Unlock()
	return nil
}

// refresh reloads the files when they changed since the last load.
func (r *Reloader) refresh() {
	stamps, err := r.stat()
	r.mu.Lock()
	changed := err == nil && !same(r.stamps, stamps)
	warned := r.failed
	r.mu.Unlock()
	if err == nil && !changed {
		return
	}
	if err == nil {
		err = r.load(stamps)
	}
	if err != nil && !warned {
		r.log.Warn("TLS files changed but do not load; serving the previous certificate", "cert_file", r.cfg.CertFile,
			"err", fmt.Errorf("reload: %w", err))
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
}

func same(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}

// ServerConfig is the TLS configuration of a server: each handshake gets
// the current certificate and client CAs.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		r.refresh()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.server, nil
	}}
}

// ClientCertificate is a tls.Config.GetClientCertificate that presents
// the current certificate.
func (r *Reloader) ClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	r.refresh()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

// Leaf is the current certificate, parsed.
func (r *Reloader) Leaf() *x509.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert.Leaf
}
