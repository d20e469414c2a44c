package helm_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpubroker/gpubroker/deploy/deploytest"
)

const (
	chartDir     = "../../deploy/helm/gpubroker"
	plainDir     = "../../deploy/kubernetes"
	secureValues = "testdata/secure-values.yaml"
)

// helmBin runs install.sh, which builds Helm on a cold cache and otherwise
// only prints where it is, and returns the helm binary.
func helmBin(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("bash", "install.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Log(s)
	}
	if err != nil {
		t.Fatalf("install.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "helm")
}

// runHelm runs helm with its configuration, cache and data in a fresh
// directory, so nothing of the machine's Helm setup counts.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/no-kubeconfig")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// render is helm template of the release gpubroker in namespace gpubroker,
// the names the plain manifests use.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "gpubroker", chartDir, "--namespace", "gpubroker"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploytest.Decode(strings.NewReader(out))
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	if len(objs) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

// strip removes what may differ between the chart and the plain manifests:
// labels and annotations (the chart adds Helm's and a config checksum), the
// release's instance label in selectors, and image pull policies (the
// chart's default is the API server's).
func strip(v any) {
	switch x := v.(type) {
	case map[string]any:
		if md, ok := x["metadata"].(map[string]any); ok {
			delete(md, "labels")
			delete(md, "annotations")
			if len(md) == 0 {
				delete(x, "metadata")
			}
		}
		delete(x, "app.kubernetes.io/instance")
		delete(x, "imagePullPolicy")
		for _, e := range x {
			strip(e)
		}
	case []any:
		for _, e := range x {
			strip(e)
		}
	}
}

// normalize returns what must agree between the chart and the plain
// manifests: the whole object but what strip removes, with YAML files in
// ConfigMaps (the broker's configuration) decoded, so that comments and key
// order do not count but every setting does.
func normalize(o *unstructured.Unstructured) (map[string]any, error) {
	m := o.DeepCopy().Object
	strip(m)
	if o.GetKind() == "ConfigMap" {
		data, _ := m["data"].(map[string]any)
		for k, v := range data {
			s, ok := v.(string)
			if !ok || !strings.HasSuffix(k, ".yaml") {
				continue
			}
			var doc any
			if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
				return nil, fmt.Errorf("%s: data %s: %w", key(o), k, err)
			}
			data[k] = doc
		}
	}
	return m, nil
}

// compare lists how the chart's objects differ from the plain manifests'.
// The Namespace is the one exception: helm install --create-namespace makes
// it, and a chart that rendered it too would clash with that.
func compare(plain, chart []*unstructured.Unstructured) []string {
	index := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			m[key(o)] = o
		}
		return m
	}
	p, c := index(plain), index(chart)
	var problems []string
	for k, po := range p {
		if po.GetKind() == "Namespace" {
			continue
		}
		co := c[k]
		if co == nil {
			problems = append(problems, k+": in deploy/kubernetes, not rendered by the chart")
			continue
		}
		pn, err := normalize(po)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		cn, err := normalize(co)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if d := cmp.Diff(pn, cn); d != "" {
			problems = append(problems, fmt.Sprintf("%s differs (-deploy/kubernetes +chart):\n%s", k, d))
		}
	}
	for k, co := range c {
		switch {
		case co.GetKind() == "Namespace":
			problems = append(problems, k+": the chart must not render the Namespace (helm install --create-namespace makes it)")
		case p[k] == nil:
			problems = append(problems, k+": rendered by the chart, not in deploy/kubernetes")
		}
	}
	sort.Strings(problems)
	return problems
}

func TestChartLints(t *testing.T) {
	for name, args := range map[string][]string{
		"default values":   nil,
		"tls and kerberos": {"-f", secureValues},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
	t.Run("lint fails on values the schema refuses", func(t *testing.T) {
		// values.schema.json: a misspelt key would otherwise be ignored
		// silently and leave TLS off.
		out, err := runHelm(t, "lint", "--strict", chartDir, "-f", secureValues, "--set", "tls.enabeld=true")
		if err == nil || !strings.Contains(out, "additional properties 'enabeld' not allowed") {
			t.Fatalf("helm lint of tls.enabeld: %v\n%s", err, out)
		}
		out, err = runHelm(t, "lint", "--strict", chartDir, "--set", "replicas=two")
		if err == nil || !strings.Contains(out, "/replicas") {
			t.Fatalf("helm lint of replicas=two: %v\n%s", err, out)
		}
	})
}

// TestChartRendersThePlainManifests keeps the chart and deploy/kubernetes
// equivalent: with the default values the chart renders every object of the
// plain manifests but the Namespace, under the same kind and name, and each
// is the same object but for labels, annotations and pull policy — the same
// RBAC rules and bindings, images, args, env, container ports, probes,
// resources, security contexts, mounted Secrets and ConfigMaps, Secret keys
// and placeholders, Service ports, and the same broker configuration.
func TestChartRendersThePlainManifests(t *testing.T) {
	plain := deploytest.Load(t, plainDir)
	chart := render(t)
	if problems := compare(plain, chart); len(problems) > 0 {
		t.Fatalf("the chart has drifted from deploy/kubernetes; change both together:\n%s", strings.Join(problems, "\n"))
	}

	// The comparison catches each kind of drift the chart could have.
	edit := func(kind, name string, f func(o map[string]any)) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, o := range plain {
			o = o.DeepCopy()
			if o.GetKind() == kind && o.GetName() == name {
				f(o.Object)
			}
			out = append(out, o)
		}
		return out
	}
	podSpec := func(o map[string]any) map[string]any {
		return o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	}
	container := func(o map[string]any) map[string]any {
		return podSpec(o)["containers"].([]any)[0].(map[string]any)
	}
	drifts := []struct {
		name, object string
		plain        []*unstructured.Unstructured
	}{
		{"an RBAC verb", "ClusterRole /gpubroker", edit("ClusterRole", "gpubroker", func(o map[string]any) {
			rule := o["rules"].([]any)[2].(map[string]any)
			rule["verbs"] = append(rule["verbs"].([]any), "delete")
		})},
		{"a binding's subject", "ClusterRoleBinding /gpubroker", edit("ClusterRoleBinding", "gpubroker", func(o map[string]any) {
			o["subjects"].([]any)[0].(map[string]any)["name"] = "default"
		})},
		{"an image", "DaemonSet gpubroker/gpubroker-agent", edit("DaemonSet", "gpubroker-agent", func(o map[string]any) {
			container(o)["image"] = "ghcr.io/gpubroker/gpubroker-agent:0.2.0"
		})},
		{"a container port", "Deployment gpubroker/gpubroker", edit("Deployment", "gpubroker", func(o map[string]any) {
			container(o)["ports"].([]any)[0].(map[string]any)["containerPort"] = int64(9090)
		})},
		{"a mounted Secret", "DaemonSet gpubroker/gpubroker-agent", edit("DaemonSet", "gpubroker-agent", func(o map[string]any) {
			podSpec(o)["volumes"].([]any)[0].(map[string]any)["secret"].(map[string]any)["secretName"] = "other-token"
		})},
		{"a Secret from the environment", "Deployment gpubroker/gpubroker", edit("Deployment", "gpubroker", func(o map[string]any) {
			ref := container(o)["env"].([]any)[0].(map[string]any)["valueFrom"].(map[string]any)["secretKeyRef"].(map[string]any)
			ref["key"] = "dsn"
		})},
		{"a broker setting", "ConfigMap gpubroker/gpubroker-config", edit("ConfigMap", "gpubroker-config", func(o map[string]any) {
			data := o["data"].(map[string]any)
			data["gpubroker.yaml"] = strings.Replace(data["gpubroker.yaml"].(string), "cluster_max_gpus: 50", "cluster_max_gpus: 40", 1)
		})},
		{"a renamed object", "Service gpubroker/gpubroker", edit("Service", "gpubroker", func(o map[string]any) {
			o["metadata"].(map[string]any)["name"] = "gpubroker-api"
		})},
	}
	for _, d := range drifts {
		problems := compare(d.plain, chart)
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), d.object) {
			t.Errorf("%s changed in the plain manifests: the comparison reported %q, want %s", d.name, problems, d.object)
		}
	}
}

// source says which key of which Secret or ConfigMap the file at path comes
// from in the pod's container ("secret NAME key KEY"), following volume
// mounts (the deepest wins, as in the kubelet), subPath, items and
// projected volumes; "" when no volume provides it.
func source(pod map[string]any, container, path string) string {
	vols := map[string]map[string]any{}
	for _, v := range list(pod["volumes"]) {
		vm := v.(map[string]any)
		vols[str(vm["name"])] = vm
	}
	var ctr map[string]any
	for _, c := range list(pod["containers"]) {
		if str(c.(map[string]any)["name"]) == container {
			ctr = c.(map[string]any)
		}
	}
	best, found := -1, ""
	for _, m := range list(ctr["volumeMounts"]) {
		mount := m.(map[string]any)
		mp, sub := str(mount["mountPath"]), str(mount["subPath"])
		var rel string
		switch {
		case sub != "" && path == mp:
			rel = sub
		case sub == "" && strings.HasPrefix(path, mp+"/"):
			rel = strings.TrimPrefix(path, mp+"/")
		default:
			continue
		}
		if len(mp) <= best {
			continue
		}
		best, found = len(mp), fromVolume(vols[str(mount["name"])], rel)
	}
	return found
}

func fromVolume(vol map[string]any, rel string) string {
	if s, ok := vol["secret"].(map[string]any); ok {
		return fromItems("secret", str(s["secretName"]), s, rel)
	}
	if c, ok := vol["configMap"].(map[string]any); ok {
		return fromItems("configMap", str(c["name"]), c, rel)
	}
	if p, ok := vol["projected"].(map[string]any); ok {
		for _, src := range list(p["sources"]) {
			sm := src.(map[string]any)
			if sa, ok := sm["serviceAccountToken"].(map[string]any); ok && str(sa["path"]) == rel {
				return "serviceAccountToken audience " + str(sa["audience"])
			}
			for _, kind := range []string{"secret", "configMap"} {
				if s, ok := sm[kind].(map[string]any); ok {
					if got := fromItems(kind, str(s["name"]), s, rel); got != "" {
						return got
					}
				}
			}
		}
	}
	return ""
}

// fromItems: without items every key is a file of its own name; with
// items only those listed, at their paths.
func fromItems(kind, name string, src map[string]any, rel string) string {
	items := list(src["items"])
	if len(items) == 0 {
		if strings.Contains(rel, "/") {
			return ""
		}
		return kind + " " + name + " key " + rel
	}
	for _, it := range items {
		im := it.(map[string]any)
		if str(im["path"]) == rel {
			return kind + " " + name + " key " + str(im["key"])
		}
	}
	return ""
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func podSpec(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, ok, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	if !ok || err != nil {
		t.Fatalf("%s has no pod spec: %v", key(o), err)
	}
	return spec
}

// brokerConfig decodes the broker's gpubroker.yaml from its ConfigMap.
func brokerConfig(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	cm := find(t, objs, "ConfigMap", "gpubroker-config")
	s, _, _ := unstructured.NestedString(cm.Object, "data", "gpubroker.yaml")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(s), &cfg); err != nil {
		t.Fatalf("gpubroker.yaml: %v", err)
	}
	return cfg
}

// TestChartTLSAndKerberos renders the chart with TLS and Kerberos on and
// checks that the configuration and the agent's flags name files that the
// right Secret and ConfigMap keys provide, and that the rest stays as with
// the default values.
func TestChartTLSAndKerberos(t *testing.T) {
	objs := render(t, "-f", secureValues)
	cfg := brokerConfig(t, objs)
	api, _ := cfg["api"].(map[string]any)
	yarnCfg, _ := cfg["yarn"].(map[string]any)
	wantTLS := map[string]any{
		"cert_file":      "/etc/gpubroker/tls/tls.crt",
		"key_file":       "/etc/gpubroker/tls/tls.key",
		"client_ca_file": "/etc/gpubroker/tls/ca.crt",
	}
	if d := cmp.Diff(wantTLS, api["tls"]); d != "" {
		t.Errorf("config api.tls (-want +got):\n%s", d)
	}
	wantKrb := map[string]any{
		"principal":         "gpubroker@HADOOP.EXAMPLE.COM",
		"keytab":            "/etc/gpubroker/kerberos/gpubroker.keytab",
		"krb5_conf":         "/etc/krb5.conf",
		"service_principal": "HTTP/_HOST@HADOOP.EXAMPLE.COM",
		"rm_principal":      "rm/_HOST@HADOOP.EXAMPLE.COM",
	}
	if d := cmp.Diff(wantKrb, yarnCfg["kerberos"]); d != "" {
		t.Errorf("config yarn.kerberos (-want +got):\n%s", d)
	}
	// Everything else is the configuration without them.
	delete(api, "tls")
	saCfg := api["agent_service_accounts"]
	delete(yarnCfg, "kerberos")
	if d := cmp.Diff(brokerConfig(t, render(t, "--set", "tls.enabled=false", "--set", "kerberos.enabled=false")), cfg); d != "" {
		t.Errorf("TLS and Kerberos changed more of the configuration than api.tls and yarn.kerberos (-plain +secure):\n%s", d)
	}
	api["agent_service_accounts"] = saCfg

	broker := podSpec(t, find(t, objs, "Deployment", "gpubroker"))
	for file, want := range map[string]string{
		"/etc/gpubroker/gpubroker.yaml":            "configMap gpubroker-config key gpubroker.yaml",
		"/etc/gpubroker/tls/tls.crt":               "secret gpubroker-tls key tls.crt",
		"/etc/gpubroker/tls/tls.key":               "secret gpubroker-tls key tls.key",
		"/etc/gpubroker/tls/ca.crt":                "secret gpubroker-tls key ca.crt",
		"/etc/gpubroker/kerberos/gpubroker.keytab": "secret gpubroker-keytab key gpubroker.keytab",
		"/etc/krb5.conf":                           "configMap gpubroker-krb5 key krb5.conf",
	} {
		if got := source(broker, "gpubroker", file); got != want {
			t.Errorf("broker file %s comes from %q, want %q", file, got, want)
		}
	}
	krb5 := find(t, objs, "ConfigMap", "gpubroker-krb5")
	conf, _, _ := unstructured.NestedString(krb5.Object, "data", "krb5.conf")
	var values struct {
		Kerberos struct {
			Krb5Conf string `yaml:"krb5Conf"`
		} `yaml:"kerberos"`
	}
	b, err := os.ReadFile(secureValues)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if conf != values.Kerberos.Krb5Conf {
		t.Errorf("krb5.conf %q, want kerberos.krb5Conf %q", conf, values.Kerberos.Krb5Conf)
	}
	ctrs, _, _ := unstructured.NestedSlice(broker, "containers")
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		if s, _, _ := unstructured.NestedString(ctrs[0].(map[string]any), probe, "httpGet", "scheme"); s != "HTTPS" {
			t.Errorf("broker %s scheme %q on a TLS listener, want HTTPS", probe, s)
		}
	}
	svc := find(t, objs, "Service", "gpubroker")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if d := cmp.Diff([]any{map[string]any{"name": "https", "port": float64(443), "targetPort": "https", "protocol": "TCP"}}, ports); d != "" {
		t.Errorf("Service ports (-want +got):\n%s", d)
	}

	agent := podSpec(t, find(t, objs, "DaemonSet", "gpubroker-agent"))
	actrs, _, _ := unstructured.NestedSlice(agent, "containers")
	args, _, _ := unstructured.NestedStringSlice(actrs[0].(map[string]any), "args")
	flags := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	if flags["broker"] != "https://gpubroker.gpubroker.svc" {
		t.Errorf("agent --broker=%q, want https://gpubroker.gpubroker.svc", flags["broker"])
	}
	// The pod's service-account token authenticates the agent for its
	// node only; no shared certificate names every node.
	if f, ok := flags["cert-file"]; ok {
		t.Errorf("agent --cert-file=%s: a DaemonSet-wide certificate names every node", f)
	}
	if got, _ := api["agent_service_accounts"].([]any); len(got) != 1 || got[0] != "gpubroker/gpubroker-agent" {
		t.Errorf("config api.agent_service_accounts %v, want [gpubroker/gpubroker-agent]", api["agent_service_accounts"])
	}
	for flag, want := range map[string]string{
		"ca-file":    "secret gpubroker-agent-tls key ca.crt",
		"token-file": "serviceAccountToken audience gpubroker",
	} {
		if flags[flag] == "" {
			t.Errorf("agent args %q have no --%s", args, flag)
			continue
		}
		if got := source(agent, "agent", flags[flag]); got != want {
			t.Errorf("agent --%s=%s comes from %q, want %q", flag, flags[flag], got, want)
		}
	}
}

// TestChartWithoutTLS: with tls.enabled=false the broker serves plain HTTP
// and the agents authenticate by token: no TLS file is mounted or named.
func TestChartWithoutTLS(t *testing.T) {
	objs := render(t, "--set", "tls.enabled=false")
	api, _ := brokerConfig(t, objs)["api"].(map[string]any)
	if tls, ok := api["tls"]; ok {
		t.Errorf("config api.tls %v with tls.enabled=false", tls)
	}
	broker := podSpec(t, find(t, objs, "Deployment", "gpubroker"))
	if got := source(broker, "gpubroker", "/etc/gpubroker/tls/tls.crt"); got != "" {
		t.Errorf("broker mounts /etc/gpubroker/tls/tls.crt from %q with tls.enabled=false", got)
	}
	ctrs, _, _ := unstructured.NestedSlice(broker, "containers")
	if s, _, _ := unstructured.NestedString(ctrs[0].(map[string]any), "readinessProbe", "httpGet", "scheme"); s == "HTTPS" {
		t.Error("readiness probe over HTTPS on a plain HTTP listener")
	}
	ports, _, _ := unstructured.NestedSlice(find(t, objs, "Service", "gpubroker").Object, "spec", "ports")
	if d := cmp.Diff([]any{map[string]any{"name": "http", "port": float64(80), "targetPort": "http", "protocol": "TCP"}}, ports); d != "" {
		t.Errorf("Service ports (-want +got):\n%s", d)
	}
	agent := podSpec(t, find(t, objs, "DaemonSet", "gpubroker-agent"))
	actrs, _, _ := unstructured.NestedSlice(agent, "containers")
	args, _, _ := unstructured.NestedStringSlice(actrs[0].(map[string]any), "args")
	want := []string{"--broker=http://gpubroker.gpubroker.svc", "--token-file=/var/run/secrets/gpubroker/token",
		"--node=$(NODE_NAME)", "--interval=15s"}
	if d := cmp.Diff(want, args); d != "" {
		t.Errorf("agent args (-want +got):\n%s", d)
	}
	if got := source(agent, "agent", "/var/run/secrets/gpubroker/token"); got != "serviceAccountToken audience gpubroker" {
		t.Errorf("agent token from %q, want the pod's service-account token of audience gpubroker", got)
	}
	// agent.auth token: the Secret's token (bound to a pool).
	objs = render(t, "--set", "tls.enabled=false", "--set", "agent.auth=token")
	agent = podSpec(t, find(t, objs, "DaemonSet", "gpubroker-agent"))
	if got := source(agent, "agent", "/var/run/secrets/gpubroker/token"); got != "secret gpubroker-agent-token key token" {
		t.Errorf("agent.auth=token: agent token from %q, want secret gpubroker-agent-token key token", got)
	}
	if api, _ := brokerConfig(t, objs)["api"].(map[string]any); api["agent_service_accounts"] != nil {
		t.Errorf("agent.auth=token: config api.agent_service_accounts %v", api["agent_service_accounts"])
	}
}

// TestChartRefusesIncompleteValues: values an operator must give make
// helm template fail with a message naming them, rather than render a
// broker that cannot start.
func TestChartRefusesIncompleteValues(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"kerberos without a principal", []string{"--set", "kerberos.enabled=true"}, "kerberos.principal is required"},
		{"kerberos without krb5.conf", []string{"--set", "kerberos.enabled=true", "--set", "kerberos.principal=gpubroker@EXAMPLE.COM"},
			"kerberos.krb5Conf is required"},
		{"no database URL", []string{"--set", "database.url="}, "database.url is required"},
		{"no agent token", []string{"--set", "agent.token="}, "agent.token is required"},
		{"a listen address without a port", []string{"--set", "config.api.listen=localhost"}, "config.api.listen \"localhost\" names no port"},
		{"a misspelt key", []string{"--set", "kerberos.enable=true"}, "additional properties 'enable' not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"template", "gpubroker", chartDir}, c.args...)...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("helm template %q: %v, want an error %q\n%s", c.args, err, c.want, out)
			}
		})
	}
	// Existing Secrets replace the chart's.
	objs := render(t, "--set", "tls.enabled=false", "--set", "database.existingSecret=pg", "--set", "agent.auth=token", "--set", "agent.existingSecret=agent-token")
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			t.Errorf("with existing Secrets the chart still renders %s", key(o))
		}
	}
	if got := source(podSpec(t, find(t, objs, "DaemonSet", "gpubroker-agent")), "agent", "/var/run/secrets/gpubroker/token"); got != "secret agent-token key token" {
		t.Errorf("agent token from %q, want the existing Secret agent-token", got)
	}
}

// TestChartOnARealControlPlane runs both renderings through the same check
// as the plain manifests (deploytest.Check): server-side dry run on a real
// kube-apiserver without warnings at the restricted Pod Security level, and
// the RBAC rules through SubjectAccessReviews. The Namespace comes from
// deploy/kubernetes, as --create-namespace plus the labels in the README
// make it.
func TestChartOnARealControlPlane(t *testing.T) {
	var ns []*unstructured.Unstructured
	for _, o := range deploytest.Load(t, plainDir) {
		if o.GetKind() == "Namespace" {
			ns = append(ns, o)
		}
	}
	if len(ns) != 1 || ns[0].GetName() != "gpubroker" {
		t.Fatalf("deploy/kubernetes has namespaces %v, want gpubroker", ns)
	}
	def, secure := render(t), render(t, "-f", secureValues)
	c := deploytest.StartCluster(t)
	t.Run("default values", func(t *testing.T) { c.Check(t, append(ns, def...)) })
	t.Run("tls and kerberos", func(t *testing.T) { c.Check(t, append(ns, secure...)) })
}
