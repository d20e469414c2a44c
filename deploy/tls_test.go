package deploy_test

import (
	"testing"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// secretMount is where a pod's container mounts a Secret volume.
func secretMount(t *testing.T, o *unstructured.Unstructured, secret string) string {
	t.Helper()
	vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	vol := ""
	for _, v := range vols {
		if n, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); n == secret {
			vol, _, _ = unstructured.NestedString(v.(map[string]any), "name")
		}
	}
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	mounts, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "volumeMounts")
	for _, m := range mounts {
		if n, _, _ := unstructured.NestedString(m.(map[string]any), "name"); n == vol && vol != "" {
			p, _, _ := unstructured.NestedString(m.(map[string]any), "mountPath")
			return p
		}
	}
	t.Fatalf("%s mounts no Secret %s", describe(o), secret)
	return ""
}

// TestManifestsServeTLS: the broker mounts Secret gpubroker-tls at
// /etc/gpubroker/tls and its configuration's api.tls names that Secret's
// keys there; its probes speak HTTPS; the agents mount Secret
// gpubroker-agent-tls at the same path (their flags are checked against
// the agent's parser in cmd/gpubroker-agent). The Helm chart uses the same
// names.
func TestManifestsServeTLS(t *testing.T) {
	var broker, agent, config *unstructured.Unstructured
	for _, o := range loadManifests(t) {
		switch o.GetKind() + "/" + o.GetName() {
		case "Deployment/gpubroker":
			broker = o
		case "DaemonSet/gpubroker-agent":
			agent = o
		case "ConfigMap/gpubroker-config":
			config = o
		}
	}
	if broker == nil || agent == nil || config == nil {
		t.Fatal("missing the broker Deployment, the agent DaemonSet or the broker ConfigMap")
	}
	if p := secretMount(t, broker, "gpubroker-tls"); p != "/etc/gpubroker/tls" {
		t.Fatalf("broker mounts gpubroker-tls at %q, want /etc/gpubroker/tls", p)
	}
	if p := secretMount(t, agent, "gpubroker-agent-tls"); p != "/etc/gpubroker/tls" {
		t.Fatalf("agent mounts gpubroker-agent-tls at %q, want /etc/gpubroker/tls", p)
	}
	raw, _, _ := unstructured.NestedString(config.Object, "data", "gpubroker.yaml")
	var cfg struct {
		API struct {
			TLS map[string]string `yaml:"tls"`
		} `yaml:"api"`
	}
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cert_file": "/etc/gpubroker/tls/tls.crt", "key_file": "/etc/gpubroker/tls/tls.key",
		"client_ca_file": "/etc/gpubroker/tls/ca.crt"}
	for k, v := range want {
		if cfg.API.TLS[k] != v {
			t.Errorf("api.tls.%s is %q, want %q", k, cfg.API.TLS[k], v)
		}
	}
	cs, _, _ := unstructured.NestedSlice(broker.Object, "spec", "template", "spec", "containers")
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		if s, _, _ := unstructured.NestedString(cs[0].(map[string]any), probe, "httpGet", "scheme"); s != "HTTPS" {
			t.Errorf("%s scheme %q, want HTTPS: the broker serves TLS only", probe, s)
		}
	}
}
