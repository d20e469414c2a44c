package broker

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors that the API maps to HTTP status codes. Adapters wrap them
// with context (fmt.Errorf("tenant %q: %w", name, ErrNotFound)) so callers
// test with errors.Is.
var (
	// ErrNotFound means the named object does not exist (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrConflict means the change clashes with the current state: a
	// duplicate key, a stale version, or an object still referenced (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrStale means an observation is too old or failed, so nothing
	// destructive may be based on it.
	ErrStale = errors.New("stale observation")
)

// ErrInProgress means an idempotent step has been started and is not done
// yet (a YARN container told to shut down that is still running): call it
// again later. It is progress, not a failure.
var ErrInProgress = errors.New("in progress")

// ValidationError reports one bad input value: which field, and what is
// allowed instead. The API answers it with 400 or 422 and this JSON shape.
type ValidationError struct {
	// Field is the dotted path of the offending value, e.g. "pools[1].max_nodes".
	Field string `json:"field"`
	// Problem says what is wrong and how to fix it, e.g. "must be at least min_nodes (2)".
	Problem string `json:"problem"`
}

func (e *ValidationError) Error() string {
	return e.Field + ": " + e.Problem
}

// Invalid returns a *ValidationError for field with a formatted problem.
func Invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// WithPrefix returns err with prefix prepended to its field path when err is
// a *ValidationError, so nested validation reports the full path
// ("tenants[2].max_gpus"). Other errors are returned unchanged.
func WithPrefix(prefix string, err error) error {
	var ve *ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	field := ve.Field
	switch {
	case field == "":
		field = prefix
	case strings.HasPrefix(field, "["):
		field = prefix + field
	default:
		field = prefix + "." + field
	}
	return &ValidationError{Field: field, Problem: ve.Problem}
}

// BackoffError means a pool cannot grow now (no capacity for the instance
// type, a launch failure, throttling); the planner skips it until Until.
type BackoffError struct {
	Pool   string
	Reason string
	Until  time.Time
}

func (e *BackoffError) Error() string {
	return "pool " + e.Pool + " backs off until " + e.Until.UTC().Format(time.RFC3339) + ": " + e.Reason
}
