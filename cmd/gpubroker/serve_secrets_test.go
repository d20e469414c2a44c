package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubroker/gpubroker/cloud/awssim"
	"github.com/gpubroker/gpubroker/store"
	"github.com/gpubroker/gpubroker/test/certtest"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// lockedBuffer collects a running command's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeLogsNoSecrets runs "gpubroker serve" over TLS at debug level
// with a database URL holding a password, makes tokens with the CLI, and
// sends requests with every token — good, expired, revoked, unknown, in
// the wrong header, in a query string, in a body — then greps everything
// serve and the CLI wrote for each token and for the password.
func TestServeLogsNoSecrets(t *testing.T) {
	ctx := context.Background()
	password := "pw-" + randomHex(t)
	dbURL := passwordURL(t, password)
	if code, _, errOut := runCLI(t, nil, "migrate", "--database-url", dbURL); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	var cliOut lockedBuffer // everything the CLI printed but the secrets on stdout
	var secrets []string
	token := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, nil, append([]string{"token", "create", "--database-url", dbURL}, args...)...)
		cliOut.Write([]byte(errOut))
		if code != 0 {
			t.Fatalf("token create %q: %s", args, errOut)
		}
		s := strings.TrimSpace(out)
		secrets = append(secrets, s)
		return s
	}
	admin := token("--role", "admin")
	viewer := token("--role", "viewer", "--expires", "1h")
	agent := token("--role", "agent", "--node", "ip-10-0-0-1")
	revoked := token("--role", "viewer", "--name", "to-revoke")
	st, err := store.Open(ctx, store.Config{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	expired, _, err := st.CreateExpiringToken(ctx, "expired", store.RoleViewer, "", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, expired)
	ts, err := st.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, nil, "token", "revoke", "--database-url", dbURL, strconv.FormatInt(ts[3].ID, 10))
	cliOut.Write([]byte(errOut))
	if code != 0 {
		t.Fatalf("revoke: %s", errOut)
	}
	unknown := "gpb_" + randomHex(t)
	secrets = append(secrets, unknown)

	// The world around serve: a YARN RM and an autoscaling group.
	ysim, err := yarnsim.New(yarnsim.Config{Queues: []yarnsim.QueueSpec{{Path: "root.training", Capacity: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	yrm := httptest.NewServer(ysim.Handler())
	t.Cleanup(yrm.Close)
	aws := awssim.New(awssim.Config{})
	awsURL, err := aws.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { aws.Close(context.Background()) })
	if err := aws.CreateGroup(awssim.GroupSpec{Name: "gpu", Min: 0, Max: 2, InstanceType: "g5.12xlarge"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ca := certtest.NewCA(t, "test CA")
	files := ca.Issue(t, "gpubroker", "127.0.0.1").Write(t, t.TempDir(), ca)
	cfg := writeFile(t, `api:
  listen: 127.0.0.1:0
  tls: {cert_file: `+files.Cert+`, key_file: `+files.Key+`, client_ca_file: `+files.CA+`}
yarn:
  rm: [`+yrm.URL+`]
  poll_interval: 200ms
cloud: {provider: aws, region: us-east-1, endpoint: `+awsURL+`}
pools:
  - {name: gpu, gpu_model: A10G, gpus_per_node: 4, max_nodes: 2}
tenants:
  - {name: training, max_gpus: 8, yarn_queues: [root.training]}
audit: {retention: 720h}
`)

	var serveErr lockedBuffer
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- run(sctx, env{stdout: &serveErr, stderr: &serveErr, getenv: func(k string) string {
			if k == "GPUBROKER_DATABASE_URL" {
				return dbURL
			}
			return ""
		}}, []string{"serve", "--config", cfg, "--log-level", "debug"})
	}()
	defer func() {
		cancel()
		<-done
	}()
	addr := ""
	for deadline := time.Now().Add(30 * time.Second); addr == ""; {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, serveErr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s", serveErr.String())
		}
		sc := bufio.NewScanner(strings.NewReader(serveErr.String()))
		for sc.Scan() {
			var line struct{ Msg, Address string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving the API and dashboard" {
				addr = line.Address
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(addr, "https://") {
		t.Fatalf("serving at %q, want https", addr)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	send := func(method, path, auth, body string) int {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, addr+path, rd)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	checks := []struct {
		method, path, auth, body string
		code                     int
	}{
		{"GET", "/api/v1/whoami", "Bearer " + admin, "", 200},
		{"GET", "/api/v1/tenants", "Bearer " + viewer, "", 200},
		{"POST", "/api/v1/tenants", "Bearer " + admin, `{"name":"ml","max_gpus":2,"weight":1}`, 201},
		{"POST", "/api/v1/tenants", "Bearer " + admin, `{"name":"` + admin + `","max_gpus":2}`, 400},
		{"PATCH", "/api/v1/policy", "Bearer " + admin, `{"expander":"` + viewer + `"}`, 428},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/report", "Bearer " + agent, `{"at":"2026-11-30T12:00:00Z"}`, 202},
		{"POST", "/api/v1/nodes/ip-10-0-0-1/cordon", "Bearer " + viewer, "", 403},
		{"GET", "/api/v1/whoami", "Bearer " + revoked, "", 401},
		{"GET", "/api/v1/whoami", "Bearer " + expired, "", 401},
		{"GET", "/api/v1/whoami", "Bearer " + unknown, "", 401},
		{"GET", "/api/v1/whoami", "Basic " + admin, "", 401},
		{"GET", "/api/v1/tenants?token=" + url.QueryEscape(admin), "Bearer " + admin, "", 400},
		{"GET", "/api/v1/nodes/" + agent, "Bearer " + admin, "", 404},
		{"GET", "/api/v1/audit", "Bearer " + admin, "", 200},
		{"GET", "/" + viewer, "", "", 404},
	}
	for _, c := range checks {
		if got := send(c.method, c.path, c.auth, c.body); got != c.code {
			t.Errorf("%s %s: got %d, want %d", c.method, c.path, got, c.code)
		}
	}
	// Plain HTTP to the TLS listener, with a token.
	req, _ := http.NewRequest("GET", "http://"+strings.TrimPrefix(addr, "https://")+"/api/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
	// Let a few ticks run and log.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(serveErr.String(), `"tick`) < 2 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
	done <- 0

	logs := serveErr.String() + cliOut.String()
	if !strings.Contains(logs, `"msg":"api request"`) || !strings.Contains(logs, "revoked token") {
		t.Fatalf("the logs hold no requests or CLI output; the check would be empty:\n%s", logs)
	}
	for i, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("token %d appears in the logs", i)
		}
		// A secret cut in two by JSON escaping or truncation is still a leak.
		if strings.Contains(logs, s[4:20]) {
			t.Errorf("part of token %d appears in the logs", i)
		}
	}
	if strings.Contains(logs, password) {
		t.Error("the database password appears in the logs")
	}
	if testing.Verbose() {
		t.Log(logs)
	}
	t.Logf("checked %d bytes of logs (%d lines) for %d tokens and the password", len(logs), strings.Count(logs, "\n"), len(secrets))
}

// passwordURL is a fresh database reached as a role with a password.
func passwordURL(t *testing.T, password string) string {
	t.Helper()
	ctx := context.Background()
	base := pg.NewDatabase(t, nil)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := "gpb_" + randomHex(t)[:8]
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN SUPERUSER PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pg.URL)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return u.String()
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
