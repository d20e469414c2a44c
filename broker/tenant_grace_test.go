package broker

import (
	"errors"
	"testing"
	"time"
)

// TestTenantEvictGraceBounds: a tenant's evict grace is zero (the
// broker's default) or up to MaxEvictGrace; anything else is refused
// naming the field.
func TestTenantEvictGraceBounds(t *testing.T) {
	base := Tenant{Name: "ml", MaxGPUs: 4, Weight: 1}
	for _, tc := range []struct {
		grace time.Duration
		ok    bool
	}{{0, true}, {2 * time.Minute, true}, {MaxEvictGrace, true}, {-time.Second, false}, {MaxEvictGrace + time.Second, false}} {
		tn := base
		tn.EvictGrace = Duration(tc.grace)
		err := tn.Validate()
		var ve *ValidationError
		switch {
		case tc.ok && err != nil:
			t.Errorf("evict grace %s refused: %v", tc.grace, err)
		case !tc.ok && (!errors.As(err, &ve) || ve.Field != "evict_grace"):
			t.Errorf("evict grace %s: %v, want a validation error naming evict_grace", tc.grace, err)
		}
	}
}
