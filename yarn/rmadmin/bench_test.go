package rmadmin_test

import (
	"context"
	"testing"

	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// BenchmarkRefreshNodes measures one refreshNodes round trip (a fresh
// connection, preamble, context, call, answer) against yarnsim's admin
// port with an empty exclude file.
func BenchmarkRefreshNodes(b *testing.B) {
	r := startRM(b)
	c, err := rmadmin.New(rmadmin.Config{Addrs: []string{r.addr}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := c.RefreshNodes(ctx, rmadmin.Graceful, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
}
