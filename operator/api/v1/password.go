package v1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Password is GatewayConfig's password field. STUNner's reference gives it as
// a string; adopters' manifests give a Secret key reference instead:
//
//	password: my-password
//	password: {name: stunner-credentials, namespace: stunner, key: password}
//
// After decoding, at most one of Value, SecretRef and Invalid is set. The
// CRD schema of the field preserves unknown fields so the API server stores
// both shapes, and any other value too: decoding never fails, so one bad
// GatewayConfig cannot break listing all of them; such a value lands in
// Invalid for the operator to report.
type Password struct {
	// Value is the inline password.
	Value string `json:"-"`
	// SecretRef points at a Secret key holding the password.
	SecretRef *SecretKeyReference `json:"-"`
	// Invalid holds a value of any other shape, as JSON, and why it is
	// not a password.
	Invalid string `json:"-"`
}

// SecretKeyReference names one key of a Secret.
type SecretKeyReference struct {
	// Name of the Secret.
	Name string `json:"name"`
	// Namespace of the Secret. Default: the namespace of the referring object.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Key in the Secret's data. Default: password.
	// +optional
	Key string `json:"key,omitempty"`
}

// InlinePassword returns a Password holding s.
func InlinePassword(s string) *Password { return &Password{Value: s} }

// UnmarshalJSON takes a JSON string (an inline password) or an object
// {name, namespace, key} (a Secret reference); null leaves p empty. Any
// other value (an object without a name or with other fields, a number, a
// list, a string that is not valid UTF-8) sets Invalid rather than
// failing; only malformed JSON is an error.
func (p *Password) UnmarshalJSON(data []byte) error {
	data = bytes.Trim(data, " \t\r\n") // JSON's whitespace: TrimSpace would take "\f0" for 0
	*p = Password{}
	if !json.Valid(data) {
		return fmt.Errorf("password: malformed JSON")
	}
	switch {
	case bytes.Equal(data, []byte("null")):
		return nil
	case data[0] == '"':
		// encoding/json would turn a byte that is not UTF-8 into U+FFFD, a
		// password no client sends: a credential is a UTF-8 string (RFC
		// 8489 §14.3). The value is not quoted in the reason.
		if !utf8.Valid(data) {
			p.Invalid = "a string that is not valid UTF-8 (credentials are UTF-8 strings, RFC 8489 §14.3)"
			return nil
		}
		return json.Unmarshal(data, &p.Value)
	case data[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var ref SecretKeyReference
		switch err := dec.Decode(&ref); {
		case err != nil:
			p.Invalid = fmt.Sprintf("%s: not a {name, namespace, key} Secret reference: %v", data, err)
		case ref.Name == "":
			p.Invalid = fmt.Sprintf("%s: a Secret reference needs a name", data)
		default:
			p.SecretRef = &ref
		}
		return nil
	}
	p.Invalid = fmt.Sprintf("%s: want a string or a {name, namespace, key} Secret reference", data)
	return nil
}

// MarshalJSON writes the form p was decoded from: a string for an inline
// password, an object for a Secret reference, null for an invalid value.
func (p Password) MarshalJSON() ([]byte, error) {
	switch {
	case p.SecretRef != nil:
		return json.Marshal(p.SecretRef)
	case p.Invalid != "":
		return []byte("null"), nil
	}
	return json.Marshal(p.Value)
}
