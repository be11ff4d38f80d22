// Package otlpjson encodes and decodes OTLP/JSON, the JSON form of the
// OTLP protobuf messages. It is protojson with lowerCamelCase names and
// enums as numbers, except that trace and span ids are hex strings where
// proto3 JSON writes bytes as base64: both directions rewrite the ids
// (Marshal in one pass over protojson's output; Unmarshal through a
// generic JSON document, keeping numbers as written).
//
// One place for the three users that each had their own copy: the traces
// file exporter (Marshal) and its reader, the simulator's telemetry
// (Marshal), and the receiver of the CLI's telemetry (Unmarshal).
package otlpjson

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ErrBadID is a trace or span id of the wrong length, not hex, or not a
// string.
var ErrBadID = errors.New("malformed trace or span id")

// idFields are the JSON names of OTLP's id fields and their byte lengths.
// They occur only on spans, span links, log records and exemplars; OTLP's
// attribute encoding never uses them as object keys, so rewriting every
// object key of that name is safe. The snake_case names are what a
// receiver may meet (protojson accepts both).
var idFields = map[string]int{
	"traceId": 16, "trace_id": 16,
	"spanId": 8, "span_id": 8,
	"parentSpanId": 8, "parent_span_id": 8,
}

var marshalOpts = protojson.MarshalOptions{UseEnumNumbers: true}

// Marshal encodes m as one OTLP/JSON document. The output is stable:
// protojson deliberately varies its whitespace, so it is compacted.
//
// One pass over protojson's output, not a generic document: decoding it
// into maps and encoding them again was a third of `run`'s CPU with
// --traces.file (and most of its garbage). protojson writes valid, compact
// JSON (but for that whitespace) in proto field order, and an id's key
// can only be a key there: a string value holding `"traceId":` has its
// quotes escaped.
func Marshal(m proto.Message) ([]byte, error) {
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("otlpjson: %w", err)
	}
	out := make([]byte, 0, len(b))
	idLen := 0 // the byte length of the id whose value comes next, or 0
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			end := stringEnd(b, i)
			if end < 0 {
				return nil, errors.New("otlpjson: unterminated string in protojson output")
			}
			str := b[i : end+1]
			j := end + 1
			for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
				j++
			}
			switch {
			case j < len(b) && b[j] == ':':
				idLen = idFields[string(str[1:len(str)-1])]
				out = append(out, str...)
			case idLen > 0 && len(str) > 2:
				raw, err := base64.StdEncoding.DecodeString(string(str[1 : len(str)-1]))
				if err != nil {
					return nil, fmt.Errorf("otlpjson: id: %w", err)
				}
				out = append(out, '"')
				out = hex.AppendEncode(out, raw)
				out = append(out, '"')
				idLen = 0
			default:
				idLen = 0
				out = append(out, str...)
			}
			i = end + 1
		default:
			if c != ':' {
				idLen = 0
			}
			out = append(out, c)
			i++
		}
	}
	return out, nil
}

// stringEnd returns the index of the quote that closes the string opening
// at b[i], or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// Unmarshal decodes one OTLP/JSON document (ids in hex, of their lengths;
// an empty id is absent) into m with opts. Anything after the document is
// an error.
func Unmarshal(b []byte, m proto.Message, opts protojson.UnmarshalOptions) error {
	doc, err := document(b)
	if err != nil {
		return err
	}
	if err := convertIDs(doc, func(n int, s string) (string, error) {
		id, err := hex.DecodeString(s)
		if err != nil || len(id) != n {
			return "", fmt.Errorf("%w: want %d hex bytes", ErrBadID, n)
		}
		return base64.StdEncoding.EncodeToString(id), nil
	}); err != nil {
		return err
	}
	pj, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("otlpjson: %w", err)
	}
	if err := opts.Unmarshal(pj, m); err != nil {
		return fmt.Errorf("otlpjson: %w", err)
	}
	return nil
}

// document decodes one JSON value, numbers kept as written (json.Number):
// int64 values and enums as ints pass through unchanged.
func document(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("otlpjson: %w", err)
	}
	if dec.More() {
		return nil, errors.New("otlpjson: data after the document")
	}
	return doc, nil
}

// convertIDs applies conv (given the id's byte length) to every non-empty
// id field of a document, in place.
func convertIDs(v any, conv func(n int, s string) (string, error)) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			n, isID := idFields[k]
			if !isID {
				if err := convertIDs(x, conv); err != nil {
					return err
				}
				continue
			}
			s, ok := x.(string)
			if !ok {
				return fmt.Errorf("%s: %w: not a string", k, ErrBadID)
			}
			if s == "" {
				continue
			}
			c, err := conv(n, s)
			if err != nil {
				return fmt.Errorf("%s %q: %w", k, s, err)
			}
			v[k] = c
		}
	case []any:
		for _, x := range v {
			if err := convertIDs(x, conv); err != nil {
				return err
			}
		}
	}
	return nil
}
