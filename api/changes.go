package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gpubroker/gpubroker/store"
)

// ChangeInfo says who last changed a versioned object and when: what a
// 412 adds so that the one who lost a race knows whom to talk to.
type ChangeInfo struct {
	Actor string    `json:"actor"`
	At    time.Time `json:"at,omitzero"`
}

// LastChangeFunc names who last changed target ("tenant/ml", "pool/gpu",
// "policy"), and false when nobody knows (no audit trail, no entry).
type LastChangeFunc func(ctx context.Context, target string) (ChangeInfo, bool)

// targetOf is the object a versioned write's path names, in the audit
// trail's form: /api/v1/tenants/ml → tenant/ml, /api/v1/policy → policy.
func targetOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		return ""
	}
	kind, name, _ := strings.Cut(rest, "/")
	switch {
	case kind == "policy" && name == "":
		return "policy"
	case kind == "tenants" && name != "" && !strings.Contains(name, "/"):
		return "tenant/" + name
	case kind == "pools" && name != "" && !strings.Contains(name, "/"):
		return "pool/" + name
	}
	return ""
}

// auditLastChange is the default LastChange: the newest successful write
// to target in the audit trail (the trail keeps refused writes too).
func auditLastChange(st interface {
	ListAudit(context.Context, store.AuditFilter) ([]store.AuditEntry, error)
}) LastChangeFunc {
	return func(ctx context.Context, target string) (ChangeInfo, bool) {
		es, err := st.ListAudit(ctx, store.AuditFilter{Target: target, Limit: 20})
		if err != nil {
			return ChangeInfo{}, false
		}
		for _, e := range es {
			if e.Status >= 200 && e.Status < 300 {
				return ChangeInfo{Actor: e.Actor, At: e.At}, true
			}
		}
		return ChangeInfo{}, false
	}
}

// changedBy asks Config.LastChange who changed the object of r, for the
// body of its 412; nil when it cannot tell.
func (s *server) changedBy(r *http.Request) *ChangeInfo {
	target := targetOf(r.URL.Path)
	if s.cfg.LastChange == nil || target == "" {
		return nil
	}
	c, ok := s.cfg.LastChange(r.Context(), target)
	if !ok || c.Actor == "" {
		return nil
	}
	return &c
}
