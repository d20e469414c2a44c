package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The deployment files under deploy/ start this agent; these tests check
// that what they pass is what the agent accepts, so a renamed flag breaks
// here and not on a fleet of GPU nodes.

const deployDir = "../../deploy"

// manifests decodes every object of a multi-document YAML file.
func manifests(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

func find(t *testing.T, objs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind {
			return o
		}
	}
	t.Fatalf("no %s", kind)
	return nil
}

// at walks a decoded manifest: keys for maps, ints for lists.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func TestDaemonSetArgumentsAreAccepted(t *testing.T) {
	agentObjs := manifests(t, filepath.Join(deployDir, "kubernetes/50-agent.yaml"))
	ds := find(t, agentObjs, "DaemonSet")
	pod := at(t, ds, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	var args []string
	for _, a := range at(t, c, "args").([]any) {
		// Kubernetes expands $(VAR) from the container's env; NODE_NAME
		// comes from the downward API.
		args = append(args, strings.ReplaceAll(a.(string), "$(NODE_NAME)", "ip-10-0-3-9.ec2.internal"))
	}
	e, _, _ := agentEnv(nil, nil)
	o, err := parseArgs(e, args)
	if err != nil {
		t.Fatalf("the DaemonSet's args %q: %v", args, err)
	}
	if o.node != "ip-10-0-3-9.ec2.internal" || o.allowNoGPU {
		t.Fatalf("parsed %+v", o)
	}

	// The broker URL names the broker's Service.
	brokerObjs := manifests(t, filepath.Join(deployDir, "kubernetes/40-broker.yaml"))
	svc := find(t, brokerObjs, "Service")
	want := "https://" + at(t, svc, "metadata", "name").(string) + "." + at(t, svc, "metadata", "namespace").(string) + ".svc"
	if o.broker != want {
		t.Fatalf("--broker %q, want the Service %q", o.broker, want)
	}
	// The broker's CA is key ca.crt of Secret gpubroker-agent-tls, mounted
	// at /etc/gpubroker/tls; the agent authenticates with its pod's
	// service-account token (audience gpubroker), bound to its node, not
	// with a certificate the whole DaemonSet would share.
	mount := at(t, c, "volumeMounts", 0)
	vol := at(t, pod, "volumes", 0)
	if at(t, mount, "name") != at(t, vol, "name") || at(t, mount, "mountPath") != "/etc/gpubroker/tls" ||
		at(t, vol, "secret", "secretName") != "gpubroker-agent-tls" {
		t.Fatalf("mount %v of volume %v, want Secret gpubroker-agent-tls at /etc/gpubroker/tls", mount, vol)
	}
	tmount, tvol := at(t, c, "volumeMounts", 1), at(t, pod, "volumes", 1)
	if at(t, tmount, "name") != at(t, tvol, "name") || at(t, tmount, "mountPath") != "/var/run/secrets/gpubroker" ||
		at(t, tvol, "projected", "sources", 0, "serviceAccountToken", "audience") != "gpubroker" ||
		at(t, tvol, "projected", "sources", 0, "serviceAccountToken", "path") != "token" {
		t.Fatalf("mount %v of volume %v, want the pod's service-account token of audience gpubroker", tmount, tvol)
	}
	if o.certFile != "" || o.keyFile != "" || o.caFile != "/etc/gpubroker/tls/ca.crt" || o.tokenFile != "/var/run/secrets/gpubroker/token" {
		t.Fatalf("cert %q key %q ca %q token %q, want the Secret's ca.crt and the projected token", o.certFile, o.keyFile, o.caFile, o.tokenFile)
	}
	// NODE_NAME comes from the node the pod runs on.
	if at(t, c, "env", 0, "name") != "NODE_NAME" || at(t, c, "env", 0, "valueFrom", "fieldRef", "fieldPath") != "spec.nodeName" {
		t.Fatalf("env %v", at(t, c, "env"))
	}
}

// unitKeys reads the [Service] keys of a systemd unit.
func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			keys[k] = v
		}
	}
	return keys
}

func TestSystemdUnitArgumentsAreAccepted(t *testing.T) {
	keys := unitKeys(t, filepath.Join(deployDir, "systemd/gpubroker-agent.service"))
	fields := strings.Fields(keys["ExecStart"])
	if len(fields) == 0 || filepath.Base(fields[0]) != "gpubroker-agent" {
		t.Fatalf("ExecStart %q", keys["ExecStart"])
	}
	// systemd sets CREDENTIALS_DIRECTORY for LoadCredential=; the
	// environment file gives GPUBROKER_URL; the node is the host name.
	cred, _, _ := strings.Cut(keys["LoadCredential"], ":")
	var args []string
	for _, a := range fields[1:] {
		args = append(args, strings.ReplaceAll(a, "${CREDENTIALS_DIRECTORY}", "/run/credentials/gpubroker-agent.service"))
	}
	e, _, _ := agentEnv(nil, map[string]string{"GPUBROKER_URL": "http://gpubroker.example.internal"})
	o, err := parseArgs(e, args)
	if err != nil {
		t.Fatalf("ExecStart args %q: %v", args, err)
	}
	if o.tokenFile != "/run/credentials/gpubroker-agent.service/"+cred || o.broker != "http://gpubroker.example.internal" || o.node != "host-from-uname" {
		t.Fatalf("parsed %+v", o)
	}
	if keys["RestartPreventExitStatus"] != "2" {
		t.Fatalf("RestartPreventExitStatus=%q: only bad flags (2) must stop restarts", keys["RestartPreventExitStatus"])
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify where systemd is
// installed. It reports unknown keys and bad values; that the binaries are
// not installed on a build machine is expected.
func TestSystemdUnitsVerify(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed; the units' ExecStart lines are checked by TestSystemdUnitArgumentsAreAccepted only")
		return
	}
	units, _ := filepath.Glob(filepath.Join(deployDir, "systemd/*.service"))
	for _, want := range []string{"gpubroker.service", "gpubroker-agent.service", "hadoop-yarn-nodemanager.service"} {
		if !slices.Contains(units, filepath.Join(deployDir, "systemd", want)) {
			t.Fatalf("units %v: %s is missing", units, want)
		}
	}
	out, _ := exec.Command(bin, append([]string{"verify", "--man=no"}, units...)...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.Contains(line, "is not executable: No such file or directory") {
			continue
		}
		t.Errorf("systemd-analyze verify: %s", line)
	}
}
