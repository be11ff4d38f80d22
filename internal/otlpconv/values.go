package otlpconv

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
)

// maxValueDepth bounds the nesting of array and kvlist values converted from
// the wire; deeper values become empty. protobuf's own decoder stops at
// 10000 levels, which a recursive conversion should not follow.
const maxValueDepth = 32

// Value converts an OTLP AnyValue to an attribute.Value. Arrays whose
// elements are all of one primitive type become the typed slices (what the
// SDK itself produces for []string etc.); other arrays, and kvlists, become
// SLICE and MAP values. A nil or unset value is EMPTY.
func Value(v *commonpb.AnyValue) attribute.Value {
	return attrValueDepth(v, 0)
}

func attrValueDepth(v *commonpb.AnyValue, depth int) attribute.Value {
	if v == nil || depth > maxValueDepth {
		return attribute.Value{}
	}
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return attribute.StringValue(x.StringValue)
	case *commonpb.AnyValue_BoolValue:
		return attribute.BoolValue(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return attribute.Int64Value(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return attribute.Float64Value(x.DoubleValue)
	case *commonpb.AnyValue_BytesValue:
		return attribute.ByteSliceValue(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		return arrayValue(x.ArrayValue.GetValues(), depth)
	case *commonpb.AnyValue_KvlistValue:
		return attribute.MapValue(keyValuesDepth(x.KvlistValue.GetValues(), depth+1)...)
	}
	return attribute.Value{}
}

// arrayValue converts the elements of an ArrayValue: a typed slice when
// they are all strings, all bools, all ints or all doubles, else a SLICE.
func arrayValue(vs []*commonpb.AnyValue, depth int) attribute.Value {
	if len(vs) > 0 {
		switch vs[0].GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			if out, ok := homogeneous(vs, func(v *commonpb.AnyValue) (string, bool) {
				_, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
				return v.GetStringValue(), ok
			}); ok {
				return attribute.StringSliceValue(out)
			}
		case *commonpb.AnyValue_BoolValue:
			if out, ok := homogeneous(vs, func(v *commonpb.AnyValue) (bool, bool) {
				_, ok := v.GetValue().(*commonpb.AnyValue_BoolValue)
				return v.GetBoolValue(), ok
			}); ok {
				return attribute.BoolSliceValue(out)
			}
		case *commonpb.AnyValue_IntValue:
			if out, ok := homogeneous(vs, func(v *commonpb.AnyValue) (int64, bool) {
				_, ok := v.GetValue().(*commonpb.AnyValue_IntValue)
				return v.GetIntValue(), ok
			}); ok {
				return attribute.Int64SliceValue(out)
			}
		case *commonpb.AnyValue_DoubleValue:
			if out, ok := homogeneous(vs, func(v *commonpb.AnyValue) (float64, bool) {
				_, ok := v.GetValue().(*commonpb.AnyValue_DoubleValue)
				return v.GetDoubleValue(), ok
			}); ok {
				return attribute.Float64SliceValue(out)
			}
		}
	}
	out := make([]attribute.Value, len(vs))
	for i, v := range vs {
		out[i] = attrValueDepth(v, depth+1)
	}
	return attribute.SliceValue(out...)
}

func homogeneous[T any](vs []*commonpb.AnyValue, get func(*commonpb.AnyValue) (T, bool)) ([]T, bool) {
	out := make([]T, len(vs))
	for i, v := range vs {
		x, ok := get(v)
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// KeyValues converts OTLP attributes, in order, duplicates kept.
func KeyValues(kvs []*commonpb.KeyValue) []attribute.KeyValue {
	return keyValuesDepth(kvs, 0)
}

func keyValuesDepth(kvs []*commonpb.KeyValue, depth int) []attribute.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = attribute.KeyValue{Key: attribute.Key(kv.GetKey()), Value: attrValueDepth(kv.GetValue(), depth)}
	}
	return out
}

// Resource builds the SDK resource of an OTLP resource and its schema URL.
func Resource(r *resourcepb.Resource, schemaURL string) *resource.Resource {
	return resource.NewWithAttributes(schemaURL, KeyValues(r.GetAttributes())...)
}

// Scope builds the SDK instrumentation scope of an OTLP scope.
func Scope(s *commonpb.InstrumentationScope, schemaURL string) instrumentation.Scope {
	return instrumentation.Scope{
		Name:       s.GetName(),
		Version:    s.GetVersion(),
		SchemaURL:  schemaURL,
		Attributes: attribute.NewSet(KeyValues(s.GetAttributes())...),
	}
}

// Time converts OTLP's nanoseconds since the epoch; 0 stays the epoch,
// which the SDK's exporters write back as 0.
func Time(ns uint64) time.Time {
	return time.Unix(0, int64(ns)) //nolint:gosec // OTLP times fit int64 until 2262.
}
