package api_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestOpenAPIMatchesRoutes checks the served OpenAPI document against the
// router: every route is documented, every documented operation exists,
// authenticated operations document 401 and 403, and every $ref resolves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/api/v1/openapi.json", "", nil)
	want(t, r, 200, "openapi")
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components map[string]map[string]any             `json:"components"`
	}
	if err := json.Unmarshal([]byte(r.raw), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	documented := map[string]map[string]any{}
	for path, item := range doc.Paths {
		for method, o := range item {
			if method == "parameters" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(o, &m); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			documented[strings.ToUpper(method)+" "+path] = m
		}
	}
	routed := map[string]bool{}
	err := chi.Walk(e.handler.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if pattern == "/*" { // the dashboard's assets
			return nil
		}
		routed[method+" "+pattern] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range routed {
		if _, ok := documented[k]; !ok {
			t.Errorf("route %s is not in openapi.json", k)
		}
	}
	var ops []string
	for k, o := range documented {
		ops = append(ops, k)
		if !routed[k] {
			t.Errorf("openapi.json documents %s, which the router does not serve", k)
		}
		if _, public := o["security"]; public {
			continue
		}
		resp, _ := o["responses"].(map[string]any)
		for _, code := range []string{"401", "403"} {
			if _, ok := resp[code]; !ok {
				t.Errorf("%s does not document %s", k, code)
			}
		}
	}
	if len(ops) < 20 {
		t.Fatalf("only %d operations documented", len(ops))
	}
	// Every $ref points at a component that exists.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				if len(parts) != 2 || doc.Components[parts[0]][parts[1]] == nil {
					t.Errorf("dangling $ref %s", ref)
				}
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(x[k])
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	var whole any
	_ = json.Unmarshal([]byte(r.raw), &whole)
	walk(whole)
}
