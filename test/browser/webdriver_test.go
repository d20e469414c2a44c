package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ensureChromium runs install.sh when chromium or chromedriver is missing.
func ensureChromium(t *testing.T) {
	t.Helper()
	_, e1 := exec.LookPath("chromium")
	_, e2 := exec.LookPath("chromedriver")
	if e1 == nil && e2 == nil {
		return
	}
	script, err := filepath.Abs("install.sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chromium or chromedriver missing: running %s", script)
	out, err := exec.Command(script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// driver is one chromedriver process with one browser session.
type driver struct {
	t       *testing.T
	base    string
	session string
}

// startDriver starts chromedriver and a headless Chromium session with a
// 1366x768 window; both end with the test.
func startDriver(t *testing.T) *driver {
	t.Helper()
	ensureChromium(t)
	port := freePort(t)
	cmd := exec.Command("chromedriver", fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	logf, err := os.Create(filepath.Join(t.TempDir(), "chromedriver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	d := &driver{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct {
			Value struct {
				Ready bool `json:"ready"`
			} `json:"value"`
		}
		if err := d.do("GET", "/status", nil, &st); err == nil && st.Value.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chromedriver did not become ready in 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	profile := t.TempDir()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chromiumBinary(),
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
				"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
				"--user-data-dir=" + profile, "--window-size=1366,768"},
		},
	}}}
	var created struct {
		Value struct {
			SessionID string `json:"sessionId"`
		} `json:"value"`
	}
	if err := d.do("POST", "/session", caps, &created); err != nil {
		t.Fatalf("new browser session: %v", err)
	}
	d.session = created.Value.SessionID
	t.Cleanup(func() { _ = d.do("DELETE", "/session/"+d.session, nil, nil) })
	return d
}

// chromiumBinary is Debian's real browser binary: /usr/bin/chromium is a
// shell wrapper, which chromedriver can also start.
func chromiumBinary() string {
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return "/usr/bin/chromium"
}

func (d *driver) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (d *driver) s(path string) string { return "/session/" + d.session + path }

func (d *driver) open(url string) {
	d.t.Helper()
	if err := d.do("POST", d.s("/url"), map[string]string{"url": url}, nil); err != nil {
		d.t.Fatal(err)
	}
}

// eval runs a script in the page and decodes its return value into out.
func (d *driver) eval(script string, out any) error {
	var res struct {
		Value json.RawMessage `json:"value"`
	}
	if err := d.do("POST", d.s("/execute/sync"), map[string]any{"script": script, "args": []any{}}, &res); err != nil {
		return err
	}
	return json.Unmarshal(res.Value, out)
}

func (d *driver) resize(w, h int) {
	d.t.Helper()
	if err := d.do("POST", d.s("/window/rect"), map[string]int{"width": w, "height": h}, nil); err != nil {
		d.t.Fatal(err)
	}
}

// screenshot saves a PNG of the viewport into dir and returns its path.
func (d *driver) screenshot(dir, name string) string {
	d.t.Helper()
	var res struct {
		Value []byte `json:"value"` // base64 in JSON decodes to bytes
	}
	if err := d.do("GET", d.s("/screenshot"), nil, &res); err != nil {
		d.t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, res.Value, 0o644); err != nil {
		d.t.Fatal(err)
	}
	return p
}
