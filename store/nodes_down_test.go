package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
)

// TestNodeDownRoundTrip: a node its side reports down (kubelet NotReady,
// NodeManager LOST) keeps Down and DownSince through the node table, and
// coming back up clears both.
func TestNodeDownRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	down := broker.Node{Name: "ip-10-0-0-9", Owner: broker.OwnerYARN, Phase: broker.PhaseActive, GPUsTotal: 4,
		Utilisation: -1, Healthy: true, Down: "NodeManager LOST", DownSince: t0.Add(-3 * time.Minute)}
	if err := s.UpsertNodes(ctx, []broker.Node{down}, t0); err != nil {
		t.Fatal(err)
	}
	n, err := s.GetNode(ctx, down.Name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Down != "NodeManager LOST" || !n.DownSince.Equal(down.DownSince) {
		t.Fatalf("stored node: down %q since %s, want %q since %s", n.Down, n.DownSince, down.Down, down.DownSince)
	}
	up := down
	up.Down, up.DownSince = "", time.Time{}
	if err := s.UpsertNodes(ctx, []broker.Node{up}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, err = s.GetNode(ctx, down.Name); err != nil || n.Down != "" || !n.DownSince.IsZero() {
		t.Fatalf("node back up: down %q since %s (%v), want neither", n.Down, n.DownSince, err)
	}
}
