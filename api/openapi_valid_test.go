package api_test

import (
	"context"
	"os"
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
