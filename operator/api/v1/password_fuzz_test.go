package v1

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzPasswordJSON decodes arbitrary JSON as GatewayConfig's password, a user-written field
// that the API server stores whatever its shape. Decoding fails only on malformed JSON, sets
// at most one of Value, SecretRef and Invalid, and what is not Invalid encodes back to a form
// that decodes the same. Seeds: testdata/fuzz/FuzzPasswordJSON.
func FuzzPasswordJSON(f *testing.F) {
	f.Add([]byte(`{"name":"stunner-credentials","namespace":"stunner","key":"password"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Password
		err := p.UnmarshalJSON(data)
		if (err != nil) == json.Valid(data) {
			t.Fatalf("UnmarshalJSON(%q) = %v; valid JSON %v", data, err, json.Valid(data))
		}
		if err != nil {
			return
		}
		set := 0
		for _, b := range []bool{p.Value != "", p.SecretRef != nil, p.Invalid != ""} {
			if b {
				set++
			}
		}
		if set > 1 {
			t.Fatalf("UnmarshalJSON(%q) set more than one form: %+v", data, p)
		}
		if p.Invalid != "" {
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", p, err)
		}
		var again Password
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(p, again) {
			t.Fatalf("%q decoded as %+v, encoded as %s, decoded again as %+v (%v)", data, p, b, again, err)
		}
	})
}
