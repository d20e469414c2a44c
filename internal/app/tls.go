package app

import (
	"errors"
	"net/http"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/internal/certreload"
)

// serveTLS configures srv for TLS when api.tls names a certificate and
// says which scheme it serves. The files are reloaded when they change;
// with a client CA, agents may authenticate by client certificate.
func (m *Main) serveTLS(srv *http.Server) (string, error) {
	c := m.cfg.TLS
	if c == (TLSConfig{}) {
		return "http", nil
	}
	r, err := certreload.New(certreload.Config{CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile, Logger: m.log})
	var ve *broker.ValidationError
	if errors.As(err, &ve) {
		return "", usagef("config: api.tls.%s %s", ve.Field, ve.Problem)
	}
	if err != nil {
		return "", err
	}
	srv.TLSConfig = r.ServerConfig()
	leaf := r.Leaf()
	m.log.Info("serving TLS", "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339),
		"client_certificates", c.ClientCAFile != "")
	return "https", nil
}

// auditRetention is Config.AuditRetention or its default.
func (m *Main) auditRetention() time.Duration {
	if m.cfg.AuditRetention > 0 {
		return m.cfg.AuditRetention
	}
	return DefaultAuditRetention
}
