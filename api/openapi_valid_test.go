package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// loadOpenAPI parses api/openapi.json with kin-openapi, a maintained
// OpenAPI 3 implementation, and validates it.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIDocumentValid validates the document with kin-openapi's
// validator (schemas, examples, defaults, parameters, references).
func TestOpenAPIDocumentValid(t *testing.T) {
	loadOpenAPI(t)
}

// TestOpenAPIHasNoDuplicateKeys walks the document's JSON tokens: a key
// written twice in one object is legal JSON that every parser resolves
// silently (the last one wins), so an edit to the first copy would be lost
// without a word — RuntimeStatus had stale_pools and claim_conflicts twice.
func TestOpenAPIHasNoDuplicateKeys(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if dups := duplicateKeys(raw); len(dups) > 0 {
		t.Errorf("openapi.json repeats keys: %s", strings.Join(dups, "; "))
	}
}

// duplicateKeys lists "path: key" for every key repeated within one object.
func duplicateKeys(raw []byte) []string {
	type frame struct {
		object bool
		path   string
		keys   map[string]bool
		key    bool // the next string token in this object is a key
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var stack []*frame
	var dups []string
	var last string // the last key read, the path of the value that follows
	for {
		tok, err := dec.Token()
		if err != nil {
			return dups
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		if f := top(); f != nil && f.object && f.key {
			if k, ok := tok.(string); ok {
				if f.keys[k] {
					dups = append(dups, f.path+": "+k)
				}
				f.keys[k] = true
				f.key = false
				last = f.path + "/" + k
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, path: last, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{path: last})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a key next.
		if f := top(); f != nil && f.object {
			f.key = true
			last = f.path
		}
	}
}

func TestDuplicateKeysFindsRepeats(t *testing.T) {
	got := duplicateKeys([]byte(`{"a": {"x": 1, "y": [{"x": 2}, {"x": 3}], "x": 4}, "b": 1, "a": 2}`))
	want := []string{"/a: x", ": a"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("duplicateKeys = %q, want %q", got, want)
	}
}
