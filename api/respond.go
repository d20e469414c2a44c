package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubroker/gpubroker/broker"
)

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	// Code is a stable, machine-readable kind: invalid, unauthorized,
	// forbidden, not_found, conflict, precondition_required,
	// precondition_failed, too_large, unsupported_media_type, unavailable,
	// method_not_allowed, internal.
	Code string `json:"code"`
	// Field names the offending body field or query parameter, if any.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// ChangedBy, on a 412, names who made the change the client missed.
	ChangedBy *ChangeInfo `json:"changed_by,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}

func writeErr(w http.ResponseWriter, code int, kind, field, msg string) {
	writeJSON(w, code, errorBody{Error: errorDetail{Code: kind, Field: field, Message: msg}})
}

// errPreconditionRequired and errPreconditionFailed are the answers of
// versioned updates; preconditionError carries the message.
type preconditionError struct {
	required bool
	msg      string
}

func (e *preconditionError) Error() string { return e.msg }

// unsupportedMediaType is a body that is not JSON.
type unsupportedMediaType struct{ got string }

func (e *unsupportedMediaType) Error() string {
	return "Content-Type must be application/json, got " + strconv.Quote(e.got)
}

// fail answers err with its status code and JSON body. Errors from the
// store and the runtime map through the broker's typed errors.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ve *broker.ValidationError
	var pe *preconditionError
	var mb *http.MaxBytesError
	var um *unsupportedMediaType
	var fe *forbiddenError
	switch {
	case errors.As(err, &ve):
		writeErr(w, http.StatusBadRequest, "invalid", ve.Field, ve.Problem)
	case errors.As(err, &pe):
		if pe.required {
			writeErr(w, http.StatusPreconditionRequired, "precondition_required", "If-Match", pe.msg)
		} else {
			writeJSON(w, http.StatusPreconditionFailed, errorBody{Error: errorDetail{Code: "precondition_failed",
				Field: "If-Match", Message: pe.msg, ChangedBy: s.changedBy(r)}})
		}
	case errors.As(err, &mb):
		writeErr(w, http.StatusRequestEntityTooLarge, "too_large", "body",
			fmt.Sprintf("must be at most %d bytes", mb.Limit))
	case errors.As(err, &um):
		writeErr(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type", um.Error())
	case errors.As(err, &fe):
		writeErr(w, http.StatusForbidden, "forbidden", fe.field, fe.msg)
	case errors.Is(err, broker.ErrNotFound):
		writeErr(w, http.StatusNotFound, "not_found", "", err.Error())
	case errors.Is(err, broker.ErrConflict):
		writeErr(w, http.StatusConflict, "conflict", "", err.Error())
	case errors.Is(err, broker.ErrStale):
		w.Header().Set("Retry-After", "5")
		writeErr(w, http.StatusServiceUnavailable, "unavailable", "", err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; there is nobody to answer.
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", redactTokens(r.URL.Path), "err", err)
		writeErr(w, http.StatusInternalServerError, "internal", "", "internal error; see the broker's log")
	}
}

// decode reads one JSON object into v: the body is capped, unknown fields
// are rejected with the list of allowed ones, and trailing data is an error.
// An empty body is allowed when emptyOK is true (v keeps its value).
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &unsupportedMediaType{got: ct}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	if field := nullField(body, ""); field != "" {
		// encoding/json would keep the zero value for a null, so a null
		// in a list or for a boolean would pass as "" or false; PostgreSQL
		// cannot store a NUL character in text.
		return broker.Invalid(field, "must not be null or contain a NUL character; give a value or leave the field out")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && emptyOK {
			return nil
		}
		return decodeError(err, v, body)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return broker.Invalid("body", "must hold exactly one JSON object; found more data after it")
	}
	return nil
}

// nullField names the first null value, or string holding a NUL, in the JSON body ("gpus[0].uuid"),
// or "" when there is none or the body is not JSON (decoding reports that).
func nullField(body []byte, path string) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return findNull(v, path)
}

func findNull(v any, path string) string {
	switch x := v.(type) {
	case nil:
		if path == "" {
			return "body"
		}
		return path
	case string:
		if strings.ContainsRune(x, 0) {
			return path
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if strings.ContainsRune(k, 0) {
				return p
			}
			if f := findNull(x[k], p); f != "" {
				return f
			}
		}
	case []any:
		for i, y := range x {
			if f := findNull(y, path+"["+strconv.Itoa(i)+"]"); f != "" {
				return f
			}
		}
	}
	return ""
}

// fieldOf finds which top-level field of body a custom decoder (such as
// broker.Duration's) refused, by decoding each field on its own; "body"
// when it cannot tell.
func fieldOf(v any, body []byte) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return "body"
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "body"
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		msg, ok := raw[name]
		if !ok || name == "" || name == "-" {
			continue
		}
		if json.Unmarshal(msg, reflect.New(f.Type).Interface()) != nil {
			return name
		}
	}
	return "body"
}

func decodeError(err error, v any, body []byte) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return err
	case errors.Is(err, io.EOF):
		return broker.Invalid("body", "must be a JSON object; the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return broker.Invalid("body", "is truncated JSON")
	case errors.As(err, &se):
		return broker.Invalid("body", "is not valid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return broker.Invalid("body", "must be a JSON object, got %s", te.Value)
		}
		return broker.Invalid(field, "must be %s, got %s", jsonKind(te.Type), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		if name == "" {
			return broker.Invalid("body", "has a field with an empty name; allowed: %s", strings.Join(jsonFields(v), ", "))
		}
		return broker.Invalid(name, "is not a known field; allowed: %s", strings.Join(jsonFields(v), ", "))
	}
	// Errors of custom decoders such as broker.Duration name the value.
	return broker.Invalid(fieldOf(v, body), "%s", err.Error())
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// jsonFields lists the JSON field names of the struct v points to.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				walk(ft)
				continue
			}
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	walk(t)
	return out
}

// etag formats a version as a strong entity tag.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads the version a client based its edit on.
func ifMatch(r *http.Request) (int64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return 0, &preconditionError{required: true,
			msg: "send If-Match with the ETag of the version you read (GET it first), so concurrent edits are not lost"}
	}
	v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || v < 0 {
		return 0, broker.Invalid("If-Match", "must be the ETag of the version you read, such as \"3\"; got %s", h)
	}
	return v, nil
}

func stale(kind string, have, sent int64) error {
	return &preconditionError{msg: fmt.Sprintf("%s was changed by someone else (now version %d, you sent %d); read it again and reapply your edit", kind, have, sent)}
}
