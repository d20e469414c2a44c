package yarn

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// scaleAnswers renders yarnsim's apps and nodes answers for 20,000 apps
// on 5,000 nodes, built as BenchmarkObserve's bigSim builds them.
func scaleAnswers(tb testing.TB) (apps, nodes []byte) {
	tb.Helper()
	var queues []yarnsim.QueueSpec
	for i := range 8 {
		queues = append(queues, yarnsim.QueueSpec{Path: fmt.Sprintf("root.q%d", i)})
	}
	sim, err := yarnsim.New(yarnsim.Config{Queues: queues})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 5000 {
		if err := sim.AddNode(yarnsim.NodeSpec{Host: fmt.Sprintf("gpu-%05d.example", i), GPUs: 8}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range 20000 {
		r := yarnsim.RequestSpec{Containers: 1 + i%4, GPUs: 1 << (i % 3)}
		if i%5 == 0 {
			r.Hosts = []string{fmt.Sprintf("gpu-%05d.example", i%5000)}
		}
		spec := yarnsim.AppSpec{Name: fmt.Sprintf("app-%d", i), Queue: fmt.Sprintf("q%d", i%8), Priority: int64(i % 10), Requests: []yarnsim.RequestSpec{r}}
		if _, err := sim.Submit(spec); err != nil {
			tb.Fatal(err)
		}
	}
	render := func(p string) []byte {
		rec := httptest.NewRecorder()
		sim.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Code != http.StatusOK {
			tb.Fatalf("%s: %d", p, rec.Code)
		}
		return rec.Body.Bytes()
	}
	return render(PathApps), render(PathNodes)
}

// BenchmarkDecode measures decoding the apps answer (88 MiB) and the nodes
// answer of 20,000 apps on 5,000 nodes into Apps and Nodes, in memory:
// "fast" is the scanner the client uses, "encoding_json" json.Unmarshal
// into the wire.go shapes and their conversion, as the client did before.
// GPUBROKER_DUMP_ANSWERS=dir writes the answers there (to measure other
// JSON libraries on the same bytes).
func BenchmarkDecode(b *testing.B) {
	apps, nodes := scaleAnswers(b)
	if dir := os.Getenv("GPUBROKER_DUMP_ANSWERS"); dir != "" {
		_ = os.WriteFile(dir+"/apps.json", apps, 0o644)
		_ = os.WriteFile(dir+"/nodes.json", nodes, 0o644)
	}
	for _, tc := range []struct {
		name string
		body []byte
		dec  func([]byte) (int, error)
	}{
		{"apps/fast", apps, func(b []byte) (int, error) { a, err := fastApps(b); return len(a), err }},
		{"apps/encoding_json", apps, func(b []byte) (int, error) { a, err := refApps(b); return len(a), err }},
		{"nodes/fast", nodes, func(b []byte) (int, error) { n, err := fastNodes(b); return len(n), err }},
		{"nodes/encoding_json", nodes, func(b []byte) (int, error) { n, err := refNodes(b); return len(n), err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				n, err := tc.dec(tc.body)
				if err != nil {
					b.Fatal(err)
				}
				if n != 20000 && n != 5000 {
					b.Fatalf("decoded %d", n)
				}
			}
		})
	}
}
