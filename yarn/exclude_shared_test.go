package yarn_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// The exclude file is shared property: these tests run on the real file
// system, with a second process as the other writer.

const lockHelperEnv = "GPUBROKER_TEST_EXCLUDE_LOCK_HOLDER"

// TestExcludeLockHolderProcess is not a test of its own: run as a child
// process (lockHelperEnv names the exclude file), it is another writer
// that follows the lock protocol, as a second broker or an operator's
// `flock .exclude.xml.lock ...` does. It takes the lock, says "locked",
// and on "write" adds ops-late.example to the file (temporary file and
// rename) and says "written"; it holds the lock until its input ends.
func TestExcludeLockHolderProcess(t *testing.T) {
	path := os.Getenv(lockHelperEnv)
	if path == "" {
		return
	}
	lf, err := os.OpenFile(yarn.LockPath(path), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("locked")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "write" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		b = []byte(strings.Replace(string(b), "</hosts>", "<host><name>ops-late.example</name><timeout>-1</timeout></host></hosts>", 1))
		tmp := path + ".ops"
		if err := os.WriteFile(tmp, b, 0o644); err != nil || os.Rename(tmp, path) != nil {
			fmt.Println("error: write")
			os.Exit(2)
		}
		fmt.Println("written")
	}
	os.Exit(0)
}

// TestExcludeFileLockSharedWithAnotherProcess: while another process
// holds the lock, the broker does not write the file (it gives up after
// its wait with ErrExcludeLocked, the file as it was); what that process
// wrote under the lock is kept by the broker's write after it.
func TestExcludeFileLockSharedWithAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "exclude.xml")
	if err := os.WriteFile(path, []byte("<hosts><host><name>ops-1.example</name></host></hosts>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExcludeLockHolderProcess$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	out := bufio.NewScanner(stdout)
	expect := func(line string) {
		t.Helper()
		if !out.Scan() || out.Text() != line {
			t.Fatalf("lock holder said %q (%v), want %q", out.Text(), out.Err(), line)
		}
	}
	expect("locked")

	f, err := yarn.NewExcludeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	yarn.SetLockWait(f, 50*time.Millisecond)
	if _, err := f.Add("gpu-1", -1); !errors.Is(err, yarn.ErrExcludeLocked) {
		t.Fatalf("Add while another process holds the lock = %v, want ErrExcludeLocked", err)
	}
	if hs, _ := f.Hosts(); len(hs) != 1 {
		t.Fatalf("file = %+v, want it untouched while locked", hs)
	}
	// The other writer edits the file under its lock, then lets go.
	if _, err := fmt.Fprintln(stdin, "write"); err != nil {
		t.Fatal(err)
	}
	expect("written")
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	if changed, err := f.Add("gpu-1", -1); err != nil || !changed {
		t.Fatalf("Add after the lock was let go = %v, %v", changed, err)
	}
	hs, _ := f.Hosts()
	want := []yarn.ExcludedHost{{Name: "ops-1.example"}, {Name: "ops-late.example", Timeout: -time.Second}, {Name: "gpu-1", Timeout: -time.Second}}
	if !slices.Equal(hs, want) {
		t.Fatalf("file = %+v, want the other writer's entries kept and gpu-1 added: %+v", hs, want)
	}
}

// TestExcludeFileNoPartialFileEverVisible: a reader that reads the file
// while the broker adds and removes hosts always reads a whole file: it
// parses, and holds the operator's entry.
func TestExcludeFileNoPartialFileEverVisible(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "exclude.xml")
	if err := os.WriteFile(path, []byte("<hosts><host><name>ops-1.example</name><timeout>600</timeout></host></hosts>\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := yarn.NewExcludeFile(path)
	reader, _ := yarn.NewExcludeFile(path)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var bad []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			hs, err := reader.Hosts()
			if err != nil || !slices.Contains(hs, yarn.ExcludedHost{Name: "ops-1.example", Timeout: 600 * time.Second}) {
				bad = append(bad, fmt.Sprintf("%+v %v", hs, err))
			}
		}
	}()
	for i := range 200 {
		host := fmt.Sprintf("gpu-%d", i%7)
		if _, err := f.Add(host, time.Minute); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := f.Remove(host); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d reads saw a partial file, first: %s", len(bad), bad[0])
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600 kept", st.Mode().Perm())
	}
}

// TestExcludeFileCopies: with copies (one per RM host's path), every
// change lands in each, and each copy keeps its own foreign entries.
func TestExcludeFileCopies(t *testing.T) {
	a := filepath.Join(t.TempDir(), "exclude.xml")
	b := filepath.Join(t.TempDir(), "exclude.xml")
	if err := os.WriteFile(b, []byte("<hosts><host><name>only-on-rm2</name></host></hosts>"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := yarn.NewExcludeFile(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Add("gpu-1", -1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a, b} {
		g, _ := yarn.NewExcludeFile(p)
		hs, _ := g.Hosts()
		if !slices.Contains(hs, yarn.ExcludedHost{Name: "gpu-1", Timeout: -time.Second}) {
			t.Errorf("%s = %+v, want gpu-1", p, hs)
		}
	}
	if g, _ := yarn.NewExcludeFile(b); !must1(g.Contains("only-on-rm2")) {
		t.Error("rm2's own entry was lost")
	}
	if _, err := yarn.NewExcludeFile(a, filepath.Join(t.TempDir(), "exclude")); err == nil {
		t.Error("a copy in another form was accepted")
	}
}

func must1(ok bool, err error) bool { return ok && err == nil }

// TestExcludeFileUnrefreshed: entries another writer added (or whose
// timeout it changed) and nobody had the RM apply are named; the broker's
// own entries, entries of hosts the RM already lists as leaving or does
// not list, and entries as they were at the broker's last refresh are not.
func TestExcludeFileUnrefreshed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exclude.xml")
	if err := os.WriteFile(path, []byte(`<hosts>
<host><name>ops-running</name></host>
<host><name>ops-leaving</name><timeout>600</timeout></host>
<host><name>ops-gone</name></host>
</hosts>`), 0o644); err != nil {
		t.Fatal(err)
	}
	rm := map[string]string{"ops-running": "RUNNING", "ops-leaving": "DECOMMISSIONING", "gpu-1": "RUNNING", "ops-new": "RUNNING"}
	state := func(h string) string { return rm[h] }
	f, _ := yarn.NewExcludeFile(path)
	if _, err := f.Add("gpu-1", -1); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Unrefreshed(state); err != nil || !slices.Equal(got, []string{"ops-running"}) {
		t.Fatalf("before any refresh: %v, %v; want [ops-running]", got, err)
	}
	// Someone refreshed; the broker saw the file as it was then.
	if err := f.MarkRefreshed(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Unrefreshed(state); len(got) != 0 {
		t.Fatalf("after a refresh: %v, want none", got)
	}
	// An operator shortens ops-leaving's timeout and adds ops-new.
	other, _ := yarn.NewExcludeFile(path)
	if _, err := other.Remove("ops-leaving"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Add("ops-leaving", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Add("ops-new", 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Unrefreshed(state); !slices.Equal(got, []string{"ops-leaving", "ops-new"}) {
		t.Fatalf("after the operator's edit: %v, want [ops-leaving ops-new]", got)
	}
}

// TestDecommissionRefusesToRefreshAnUnrefreshedEdit: against yarnsim's
// RM and admin port, an operator's entry for a running host that nobody
// refreshed stops the broker's refresh (the RM would decommission that
// host too): the error names it, wraps broker.ErrConflict, and both hosts
// stay RUNNING; once the operator takes the entry back, the broker goes
// on.
func TestDecommissionRefusesToRefreshAnUnrefreshedEdit(t *testing.T) {
	ctx := testCtx(t)
	e := newDecomEnv(t, "exclude.xml", []string{"g1", "g2"}, yarn.DecommissionConfig{})
	// The operator's edit, not refreshed.
	ops, _ := yarn.NewExcludeFile(e.ex.Path())
	if _, err := ops.Add("g2", 0); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.Decommission(ctx, "g1", -1)
	if err == nil || !errors.Is(err, broker.ErrConflict) || !strings.Contains(err.Error(), "g2") {
		t.Fatalf("Decommission with an unrefreshed foreign entry = %v, want a conflict naming g2", err)
	}
	for _, h := range []string{"g1", "g2"} {
		if s := state(t, ctx, e.client, h); s != "RUNNING" {
			t.Fatalf("%s is %s, want RUNNING: nothing was refreshed", h, s)
		}
	}
	// The operator takes the entry back; the broker then goes on.
	if _, err := ops.Remove("g2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Decommission(ctx, "g1", -1); err != nil {
		t.Fatalf("Decommission after the operator's entry went: %v", err)
	}
	if s := state(t, ctx, e.client, "g1"); s != "DECOMMISSIONING" && s != "DECOMMISSIONED" {
		t.Fatalf("g1 is %s, want leaving", s)
	}
}
