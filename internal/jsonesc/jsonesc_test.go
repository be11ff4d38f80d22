package jsonesc

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestStrings: the escaped text decodes to the same value, and every
// chosen character of a string was escaped.
func TestStrings(t *testing.T) {
	for _, line := range []string{
		`{"type":"system","subtype":"task_started","task_id":"t\"1\\","n":[1,true,null,"caf\u00e9 é"],"o":{"k":"v"}}`,
		`{"a":"\u001b[31m","b":"/"}`,
		`[]`,
	} {
		for _, upper := range []bool{false, true} {
			esc := Strings([]byte(line), upper, func(c byte) bool { return c != 'z' })
			var want, got any
			if err := json.Unmarshal([]byte(line), &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(esc, &got); err != nil {
				t.Fatalf("%s: %v", esc, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s decodes to %v, want %v", esc, got, want)
			}
		}
	}
	if got := string(Strings([]byte(`{"ab":"c","d":1}`), true, func(c byte) bool { return c != 'b' })); got != `{"\u0061b":"\u0063","\u0064":1}` {
		t.Errorf("got %s", got)
	}
	if got := string(Strings([]byte(`{"_":"x"}`), true, func(byte) bool { return true })); got != `{"\u005F":"\u0078"}` {
		t.Errorf("upper: got %s", got)
	}
}
