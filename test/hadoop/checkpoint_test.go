package hadoop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/colinmarc/hdfs/v2"

	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/yarn"
)

// TestCheckpointAgeOnHDFS writes a checkpoint tree to a real MiniDFSCluster
// and reads its age through yarn.CheckpointReader.
func TestCheckpointAgeOnHDFS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	h, c := startTestHDFS(t, ctx)

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, newest := now.Add(-2*time.Hour), now.Add(-7*time.Minute)
	for _, d := range []string{"/ckpt/job1/step-100", "/ckpt/job1/step-200", "/ckpt/empty"} {
		if err := c.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path string
		at   time.Time
	}{
		{"/ckpt/job1/step-100/model.pt", old},
		{"/ckpt/job1/step-200/model.pt", newest},
	} {
		writeHDFSFile(t, c, f.path)
		if err := c.Chtimes(f.path, f.at, f.at); err != nil {
			t.Fatal(err)
		}
	}
	// Directories carry old times too, so only the newest file decides.
	for _, d := range []string{"/ckpt/job1/step-100", "/ckpt/job1/step-200", "/ckpt/job1", "/ckpt/empty"} {
		if err := c.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}

	r, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Now: func() time.Time { return now }, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	age, ok := r.WorkAtRisk(ctx, "hdfs://"+h.NameNode+"/ckpt/job1")
	if !ok || age != 7*time.Minute {
		t.Fatalf("work at risk = %s, %v; want 7m0s from the newest checkpoint", age, ok)
	}
	if got := r.CheckpointAge(ctx, []string{"gpubroker.io/checkpoint-dir=hdfs://" + h.NameNode + "/ckpt/job1"}); got != 7*time.Minute {
		t.Fatalf("CheckpointAge from the tag = %s, want 7m0s", got)
	}
	// An empty directory has only its own time.
	if age, ok := r.WorkAtRisk(ctx, "hdfs://"+h.NameNode+"/ckpt/empty"); !ok || age != 2*time.Hour {
		t.Fatalf("empty dir: %s, %v; want 2h0m0s", age, ok)
	}
	// A missing directory: unknown, not an error.
	if age, ok := r.WorkAtRisk(ctx, "hdfs://"+h.NameNode+"/ckpt/nope"); ok {
		t.Fatalf("missing dir: %s, known; want unknown", age)
	}
	// A NameNode that is gone: unknown, within the timeout.
	h.Close()
	r2, _ := yarn.NewCheckpointReader(yarn.CheckpointConfig{Timeout: 5 * time.Second})
	start := time.Now()
	if _, ok := r2.WorkAtRisk(ctx, "hdfs://"+h.NameNode+"/ckpt/job1"); ok {
		t.Fatal("age known with the NameNode stopped")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("lookup against a stopped NameNode took %s", took)
	}
}

// startTestHDFS starts a MiniDFSCluster for the test and a client of it,
// both closed when the test ends.
func startTestHDFS(t *testing.T, ctx context.Context) (*hadoop.HDFS, *hdfs.Client) {
	t.Helper()
	h, err := hadoop.StartHDFS(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("start hdfs: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{h.NameNode}, User: "gpubroker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return h, c
}

// writeHDFSFile writes a small file at path.
func writeHDFSFile(t *testing.T, c *hdfs.Client, path string) {
	t.Helper()
	w, err := c.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("weights")); err != nil {
		t.Fatal(err)
	}
	// Close answers ErrReplicating until the NameNode has the block
	// replicated; the client's documentation says to retry.
	for i := 0; ; i++ {
		err := w.Close()
		if err == nil {
			return
		}
		if !errors.Is(err, hdfs.ErrReplicating) || i > 100 {
			t.Fatalf("close %s: %v", path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
