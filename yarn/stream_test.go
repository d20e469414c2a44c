package yarn

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// choppy reads at most a pseudo-random 1..max bytes at a time, so a
// stream scanner's window ends at every kind of place in a value.
type choppy struct {
	r   io.Reader
	rnd *rand.Rand
	max int
}

func (c *choppy) Read(p []byte) (int, error) {
	if n := 1 + c.rnd.IntN(c.max); len(p) > n {
		p = p[:n]
	}
	return c.r.Read(p)
}

// streamSame decodes b whole and streamed in small reads and requires the
// same result: values, or errors at the same offset.
func streamSame[T any](t *testing.T, name string, b []byte, max int, whole func(*scanner) (T, error)) {
	t.Helper()
	want, werr := whole(&scanner{b: b})
	s := newStreamScanner(&choppy{r: bytes.NewReader(b), rnd: rand.New(rand.NewPCG(uint64(len(b)), 7)), max: max}, nil)
	got, gerr := whole(s)
	if s.readErr() != nil {
		t.Fatalf("%s: read error %v", name, s.readErr())
	}
	if (werr == nil) != (gerr == nil) {
		t.Errorf("%s: whole error %v, streamed error %v", name, werr, gerr)
		return
	}
	if werr != nil {
		var ws, gs *scanError
		if !errors.As(werr, &ws) || !errors.As(gerr, &gs) || *ws != *gs {
			t.Errorf("%s: whole error %v, streamed error %v", name, werr, gerr)
		}
		return
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: streamed decode differs (-whole +streamed):\n%s", name, d)
	}
}

func streamApps(s *scanner) ([]App, error) {
	var r appsAnswer
	err := r.decode(s)
	return r.apps, err
}

func streamNodes(s *scanner) ([]Node, error) {
	var r nodesAnswer
	err := r.decode(s)
	return r.nodes, err
}

func streamContainers(s *scanner) ([]Container, error) {
	var r containersAnswer
	err := r.decode(s)
	return r.containers, err
}

// TestStreamDecodeMatchesWhole decodes every recorded answer, cuts of
// them, and a yarnsim apps answer of several MiB (whose window is dropped
// and refilled many times) streamed in small reads, and requires what the
// decoders make of the whole body.
func TestStreamDecodeMatchesWhole(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded answers: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 1, len(b) / 3, len(b) / 2, len(b) - 1, len(b)} {
			name := fmt.Sprintf("%s[:%d]", f, n)
			streamSame(t, name, b[:n], 7, streamApps)
			streamSame(t, name, b[:n], 7, streamNodes)
			streamSame(t, name, b[:n], 7, streamContainers)
		}
	}

	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("n%03d.example", i), GPUs: 4}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 {
		r := yarnsim.RequestSpec{Containers: 1 + i%2, GPUs: 1 + i%3}
		if i%3 == 0 {
			r.Hosts = []string{fmt.Sprintf("n%03d.example", i%100)}
		}
		if _, err := sim.Submit(yarnsim.AppSpec{Name: fmt.Sprintf("app-\"%d\"", i), Queue: []string{"a", "b"}[i%2],
			Priority: int64(i % 5), Requests: []yarnsim.RequestSpec{r}}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	for _, p := range []string{PathApps, PathNodes} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if p == PathApps && len(b) < 8*scanChunk {
			t.Fatalf("apps answer of %d bytes: too small to refill the window", len(b))
		}
		for _, n := range []int{len(b), len(b) - 1, len(b) / 2, len(b)/2 + 17} {
			name := fmt.Sprintf("yarnsim %s[:%d]", p, n)
			streamSame(t, name, b[:n], 3000, streamApps)
			streamSame(t, name, b[:n], 3000, streamNodes)
		}
	}
}
