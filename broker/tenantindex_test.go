package broker

import "testing"

// TestTenantIndex pins the one tenant mapping both sides look tenants up
// in: a queue by full path, then nearest listed ancestor, then leaf name;
// a claim two tenants make goes to the first by name, whatever the order.
func TestTenantIndex(t *testing.T) {
	tenants := []Tenant{
		{Name: "zeta", YARNQueues: []string{"root.shared"}, Namespaces: []string{"shared"}},
		{Name: "ml", YARNQueues: []string{"root.ml", "adhoc"}, Namespaces: []string{"ml", "shared"}},
		{Name: "batch", YARNQueues: []string{"root.ml.batch", "root.shared"}},
	}
	x := NewTenantIndex(tenants)
	for path, want := range map[string]string{
		"root.ml":          "ml",
		"root.ml.train":    "ml",    // nearest listed ancestor
		"root.ml.batch.q1": "batch", // the nearer ancestor wins
		"root.other.adhoc": "ml",    // leaf name
		"root.shared":      "batch", // claimed twice: batch < zeta
		"root.none":        "",
	} {
		got, ok := x.QueueTenant(path)
		if got.Name != want || ok != (want != "") {
			t.Errorf("queue %s: %q %v, want %q", path, got.Name, ok, want)
		}
	}
	if got, ok := x.NamespaceTenant("shared"); !ok || got.Name != "ml" {
		t.Errorf("namespace shared: %q %v, want ml (first by name)", got.Name, ok)
	}
	if _, ok := x.NamespaceTenant("nobody"); ok {
		t.Error("an unclaimed namespace maps to a tenant")
	}
	reversed := []Tenant{tenants[2], tenants[1], tenants[0]}
	if y := NewTenantIndex(reversed); y.Queues["root.shared"] != "batch" || y.Namespaces["shared"] != "ml" {
		t.Errorf("the index depends on the order of tenants: %v %v", y.Queues, y.Namespaces)
	}
}
