package yarn_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn"
)

func TestCheckpointDirFromTags(t *testing.T) {
	tags := []string{"team=ml", "gpubroker.io/checkpoint-dir=hdfs://nn:8020/ckpt/job1"}
	if got := yarn.CheckpointDir(tags); got != "hdfs://nn:8020/ckpt/job1" {
		t.Fatalf("CheckpointDir = %q", got)
	}
	if got := yarn.CheckpointDir([]string{"team=ml"}); got != "" {
		t.Fatalf("CheckpointDir without the tag = %q", got)
	}
}

// TestCheckpointUnknownNeverBlocks: bad URIs, a refused connection and a
// NameNode that accepts but never answers all give "unknown" within the
// timeout, and answers are cached.
func TestCheckpointUnknownNeverBlocks(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close() // hold it open, silent
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := closed.Addr().String()
	closed.Close()

	r, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Timeout: 300 * time.Millisecond, CacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/no/scheme", "s3://bucket/x", "hdfs:///no-host", "hdfs://" + refused + "/ckpt", "hdfs://" + ln.Addr().String() + "/ckpt"} {
		start := time.Now()
		if age, ok := r.WorkAtRisk(ctx, dir); ok {
			t.Errorf("%s: age %s known", dir, age)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %s, over the 300ms timeout by far", dir, took)
		}
	}
	if accepted.Load() != 1 {
		t.Fatalf("the silent NameNode saw %d connections, want 1", accepted.Load())
	}
	// Cached: no second connection.
	if _, ok := r.WorkAtRisk(ctx, "hdfs://"+ln.Addr().String()+"/ckpt"); ok {
		t.Fatal("cached answer became known")
	}
	if accepted.Load() != 1 {
		t.Fatalf("a cached lookup connected again (%d connections)", accepted.Load())
	}
	if got := r.CheckpointAge(ctx, []string{"team=ml"}); got != -1 {
		t.Fatalf("CheckpointAge without a tag = %s, want -1", got)
	}
	if got := r.CheckpointAge(ctx, []string{yarn.CheckpointDirKey + "=hdfs://" + refused + "/x"}); got != -1 {
		t.Fatalf("CheckpointAge with the NameNode down = %s, want -1", got)
	}
	if _, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Timeout: -1}); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
}
