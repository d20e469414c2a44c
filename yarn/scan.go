package yarn

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// scanner is a small JSON reader for the large RM answers (apps, nodes,
// containers): it decodes straight into the shapes the mapping needs, skips
// every other value without building it, and allocates only the strings it
// keeps. It reads Jersey's quirks as the wire.go decoders do: collections
// as null, {}, a bare object or an array (each), integers as numbers or
// strings (flexInt), and keys matched without regard to ASCII case, as
// encoding/json matches them.
//
// It reads either a whole answer held in b, or a stream (newStreamScanner):
// then b is a window of the body that grows as values need more bytes
// (fill) and drops what was read at the points the decoders mark as safe
// (release, between the elements of a collection), so an answer of tens of
// MiB is decoded in a window of about one element.
//
// Errors are sticky: after the first, every method returns zero values and
// s.err names the offset.
type scanner struct {
	b   []byte
	i   int
	err error
	// key is the current object key, ASCII-lowercased (reused).
	key []byte

	// r is the stream b is read from, nil when b is the whole answer;
	// off counts the bytes dropped before b[0]; rerr is r's error (io.EOF
	// at the end).
	r    io.Reader
	off  int
	rerr error
}

// scanChunk is the most a stream scanner reads at a time.
const scanChunk = 64 << 10

// newStreamScanner returns a scanner reading r, in the window buf (reused:
// its contents are overwritten).
func newStreamScanner(r io.Reader, buf []byte) *scanner {
	return &scanner{r: r, b: buf[:0]}
}

// fill reads more of the stream onto the end of b, keeping everything in
// b (indices into b stay valid); false when no more will come.
func (s *scanner) fill() bool {
	if s.r == nil || s.rerr != nil {
		return false
	}
	for {
		if cap(s.b)-len(s.b) < scanChunk/2 {
			nb := make([]byte, len(s.b), 2*cap(s.b)+scanChunk)
			copy(nb, s.b)
			s.b = nb
		}
		n, err := s.r.Read(s.b[len(s.b):min(cap(s.b), len(s.b)+scanChunk)])
		s.b = s.b[:len(s.b)+n]
		if err != nil {
			s.rerr = err
		}
		if n > 0 {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// have reports whether b[j] is there, reading more of a stream if needed.
func (s *scanner) have(j int) bool {
	for j >= len(s.b) {
		if !s.fill() {
			return false
		}
	}
	return true
}

// release drops the bytes already read from a stream's window. Only
// decoders call it, between values, where no index into b is held. It
// waits until several chunks were read: the unread rest (at most a chunk)
// is copied to the front, so that copy stays a fraction of what was read.
func (s *scanner) release() {
	if s.r == nil || s.i < 4*scanChunk {
		return
	}
	n := copy(s.b, s.b[s.i:])
	s.b = s.b[:n]
	s.off += s.i
	s.i = 0
}

// readErr is the stream's read error, nil at a clean end.
func (s *scanner) readErr() error {
	if s.rerr == io.EOF {
		return nil
	}
	return s.rerr
}

// window is the scanner's buffer, for reuse by the next stream scanner.
func (s *scanner) window() []byte { return s.b[:0] }

// scanError is a decode error at an offset; eof marks an answer that ended
// in the middle of a value (a truncated body).
type scanError struct {
	off int
	eof bool
	msg string
}

func (e *scanError) Error() string {
	if e.eof {
		return fmt.Sprintf("unexpected end of JSON input at offset %d", e.off)
	}
	return fmt.Sprintf("%s at offset %d", e.msg, e.off)
}

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = &scanError{off: s.off + s.i, eof: s.i >= len(s.b) && !s.fill(), msg: fmt.Sprintf(format, args...)}
	}
}

// ws skips white space and returns the next byte, 0 at the end.
func (s *scanner) ws() byte {
	for {
		for s.i < len(s.b) {
			switch c := s.b[s.i]; c {
			case ' ', '\t', '\n', '\r':
				s.i++
			default:
				return c
			}
		}
		if !s.fill() {
			return 0
		}
	}
}

// end checks that nothing but white space follows the top-level value.
func (s *scanner) end() error {
	if s.err == nil && s.ws() != 0 {
		s.fail("invalid character %q after top-level value", s.b[s.i])
	}
	return s.err
}

// null consumes a null literal if one is next.
func (s *scanner) null() bool {
	if s.err != nil {
		return false
	}
	if s.ws() == 'n' {
		s.literal("null")
		return true
	}
	return false
}

func (s *scanner) literal(lit string) {
	if !s.have(s.i + len(lit) - 1) {
		s.i = len(s.b)
		s.fail("truncated literal")
		return
	}
	if string(s.b[s.i:s.i+len(lit)]) != lit {
		s.fail("invalid literal")
		return
	}
	s.i += len(lit)
}

// rawString consumes a string and returns its bytes between the quotes,
// and whether they hold escapes.
func (s *scanner) rawString() ([]byte, bool) {
	if s.err != nil {
		return nil, false
	}
	if s.ws() != '"' {
		s.fail("expected string")
		return nil, false
	}
	s.i++
	start := s.i
	// Fast path: the closing quote with no backslash before it.
	for j := start; j < len(s.b) || s.have(j); j++ {
		if c := s.b[j]; c == '"' {
			s.i = j + 1
			return s.b[start:j], false
		} else if c == '\\' || c < 0x20 || c >= 0x80 {
			break // escapes, control bytes, non-ASCII: encoding/json's rules
		}
	}
	esc := false
	for s.i < len(s.b) || s.have(s.i) {
		switch s.b[s.i] {
		case '"':
			raw := s.b[start:s.i]
			s.i++
			return raw, esc
		case '\\':
			esc = true
			s.i += 2
		default:
			// Control bytes and non-ASCII go through encoding/json too: it
			// rejects the first and replaces invalid UTF-8 with U+FFFD.
			esc = esc || s.b[s.i] < 0x20 || s.b[s.i] >= 0x80
			s.i++
		}
	}
	s.i = len(s.b)
	s.fail("truncated string")
	return nil, false
}

// unescape decodes a string's bytes holding escapes (rare: encoding/json
// does it).
func (s *scanner) unescape(raw []byte) string {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var out string
	if err := json.Unmarshal(q, &out); err != nil {
		s.fail("invalid string: %v", err)
	}
	return out
}

// str decodes a string or null ("").
func (s *scanner) str() string {
	if s.null() {
		return ""
	}
	raw, esc := s.rawString()
	if esc {
		return s.unescape(raw)
	}
	return string(raw)
}

// boolean decodes true, false or null (false).
func (s *scanner) boolean() bool {
	switch s.ws() {
	case 't':
		s.literal("true")
		return true
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.fail("expected boolean")
	}
	return false
}

// flexInt decodes an integer as flexInt.UnmarshalJSON does: a number, a
// string holding one, a float (truncated) or null (0).
func (s *scanner) flexInt() int64 {
	if s.err != nil {
		return 0
	}
	var tok []byte
	switch c := s.ws(); {
	case c == 'n':
		s.literal("null")
		return 0
	case c == '"':
		raw, esc := s.rawString()
		if esc {
			tok = []byte(s.unescape(raw))
		} else {
			tok = raw
		}
	default:
		start := s.i
		for s.i < len(s.b) || s.have(s.i) {
			c := s.b[s.i]
			if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				s.i++
				continue
			}
			break
		}
		tok = s.b[start:s.i]
		if len(tok) == 0 {
			s.fail("expected integer")
			return 0
		}
		if s.i >= len(s.b) {
			s.fail("truncated number")
			return 0
		}
	}
	if s.err != nil {
		return 0
	}
	// Fast path: a plain decimal integer that fits.
	if n := len(tok); n > 0 && n < 19 {
		neg := tok[0] == '-'
		j := 0
		if neg {
			j = 1
		}
		var v int64
		ok := j < n
		for ; j < n; j++ {
			c := tok[j]
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if ok {
			if neg {
				v = -v
			}
			return v
		}
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(tok), 64)
		if ferr != nil {
			s.fail("decode integer %s: %v", tok, err)
			return 0
		}
		v = int64(f)
	}
	return v
}

// skip consumes one value of any kind without decoding it.
func (s *scanner) skip() {
	if s.err != nil {
		return
	}
	switch c := s.ws(); c {
	case '"':
		s.rawString()
	case '{', '[':
		// One tight loop over the value: strings are stepped over in
		// place, so braces inside them do not count.
		// A stream's window grows (fill) under the loop: b is taken
		// again after each fill, i stays valid.
		b, i, depth := s.b, s.i, 0
		for {
			if i >= len(b) {
				if !s.fill() {
					break
				}
				b = s.b
				continue
			}
			c := b[i]
			i++
			if !structural[c] {
				continue
			}
			switch c {
			case '"':
				for {
					if i >= len(b) {
						if !s.fill() {
							break
						}
						b = s.b
						continue
					}
					c = b[i]
					i++
					if c == '"' {
						break
					}
					if c == '\\' {
						i++
					}
				}
			case '{', '[':
				depth++
			default: // '}', ']'
				depth--
				if depth == 0 {
					s.i = i
					return
				}
			}
		}
		s.i = len(b)
		s.fail("truncated value")
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	case 0:
		s.fail("truncated value")
	default:
		start := s.i
		for s.i < len(s.b) || s.have(s.i) {
			c := s.b[s.i]
			if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				s.i++
				continue
			}
			break
		}
		if s.i == start {
			s.fail("invalid character %q looking for beginning of value", c)
		} else if s.i >= len(s.b) {
			s.fail("truncated number")
		}
	}
}

// object decodes an object (or null: nothing), calling field for each key
// with s.key set to the key lowercased; field must consume the value (skip
// it when it is of no interest).
func (s *scanner) object(field func()) {
	if s.null() || s.err != nil {
		return
	}
	if s.ws() != '{' {
		s.fail("expected object")
		return
	}
	s.i++
	if s.ws() == '}' {
		s.i++
		return
	}
	for s.err == nil {
		raw, esc := s.rawString()
		if s.err != nil {
			return
		}
		if esc {
			raw = []byte(s.unescape(raw))
		}
		s.key = s.key[:0]
		for _, c := range raw {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			s.key = append(s.key, c)
		}
		if s.ws() != ':' {
			s.fail("expected colon after object key")
			return
		}
		s.i++
		field()
		if s.err != nil {
			return
		}
		switch s.ws() {
		case ',':
			s.i++
		case '}':
			s.i++
			return
		default:
			s.fail("expected comma or end of object")
		}
	}
}

// each decodes a JAXB collection as list[T] does: null or {} is empty, an
// array holds the elements, anything else is the one element. elem must
// consume one element.
func (s *scanner) each(elem func()) {
	if s.null() || s.err != nil {
		return
	}
	switch s.ws() {
	case '[':
		s.i++
		if s.ws() == ']' {
			s.i++
			return
		}
		for s.err == nil {
			elem()
			if s.err != nil {
				return
			}
			switch s.ws() {
			case ',':
				s.i++
			case ']':
				s.i++
				return
			default:
				s.fail("expected comma or end of array")
			}
		}
	case '{':
		j := s.i + 1
		for (j < len(s.b) || s.have(j)) && (s.b[j] == ' ' || s.b[j] == '\t' || s.b[j] == '\n' || s.b[j] == '\r') {
			j++
		}
		if s.have(j) && s.b[j] == '}' {
			s.i = j + 1
			return
		}
		elem()
	default:
		elem()
	}
}

// resource decodes a ResourceInfo (or null) as resourceInfo.get reads it:
// memory, vCores, and the value of resource type name, with whether the
// type is present.
func (s *scanner) resource(name string) (memory, vcores, value int64, present, found bool) {
	if s.null() {
		return
	}
	present = true
	s.object(func() {
		switch string(s.key) {
		case "memory":
			memory = s.flexInt()
		case "vcores":
			vcores = s.flexInt()
		case "resourceinformations":
			// A repeated key replaces the list, as encoding/json does.
			value, found = 0, false
			s.object(func() {
				if string(s.key) != "resourceinformation" {
					s.skip()
					return
				}
				value, found = 0, false
				s.each(func() {
					var n string
					var v int64
					s.object(func() {
						switch string(s.key) {
						case "name":
							n = s.str()
						case "value":
							v = s.flexInt()
						default:
							s.skip()
						}
					})
					if !found && n == name {
						value, found = v, true
					}
				})
			})
		default:
			s.skip()
		}
	})
	return
}

// structural marks the bytes skip must look at inside objects and arrays.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}
