package broker

import (
	"encoding/json"
	"fmt"
)

// encodeOpData encodes an op's step data for the journal. json.Marshal fails
// only on values JSON cannot hold (a deadline past the year 9999, a NaN or
// infinite float in a victim); callers then journal or advance nothing, so
// a step's state is never silently replaced by an empty one.
func encodeOpData(d opData) (json.RawMessage, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode op data: %w", err)
	}
	return b, nil
}

// decisionDetail encodes v as the structured detail of a decision of kind.
// A value that cannot be encoded is logged and left out: the decision is
// still recorded with its reason.
func (r *Runtime) decisionDetail(kind string, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		r.log.Error("encode decision detail", "kind", kind, "err", err)
		return nil
	}
	return b
}
