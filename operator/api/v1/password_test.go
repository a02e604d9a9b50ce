package v1

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestPasswordForms(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		want        Password
		wantInvalid string
	}{
		{name: "inline string", yaml: "password: s3cret", want: Password{Value: "s3cret"}},
		{name: "quoted number stays text", yaml: `password: "1234"`, want: Password{Value: "1234"}},
		{
			name: "secret reference",
			yaml: "password:\n  name: stunner-credentials\n  namespace: stunner\n  key: password",
			want: Password{SecretRef: &SecretKeyReference{Name: "stunner-credentials", Namespace: "stunner", Key: "password"}},
		},
		{
			name: "secret reference with defaults",
			yaml: "password: {name: creds}",
			want: Password{SecretRef: &SecretKeyReference{Name: "creds"}},
		},
		{name: "reference without name", yaml: "password: {key: password}", wantInvalid: "needs a name"},
		{name: "reference with unknown field", yaml: "password: {name: a, secret: b}", wantInvalid: "secret"},
		{name: "list", yaml: "password: [a]", wantInvalid: "want a string"},
		{name: "bare number", yaml: "password: 1234", wantInvalid: "want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec GatewayConfigSpec
			if err := yaml.Unmarshal([]byte(tt.yaml), &spec); err != nil {
				t.Fatal(err) // decoding never fails on a value's shape
			}
			if tt.wantInvalid != "" {
				p := spec.Password
				if p.Value != "" || p.SecretRef != nil || !strings.Contains(p.Invalid, tt.wantInvalid) {
					t.Fatalf("got %+v, want Invalid containing %q", p, tt.wantInvalid)
				}
				return
			}
			got := *spec.Password
			if got.Value != tt.want.Value || (got.SecretRef == nil) != (tt.want.SecretRef == nil) ||
				(got.SecretRef != nil && *got.SecretRef != *tt.want.SecretRef) {
				t.Fatalf("got %+v (ref %+v), want %+v", got, got.SecretRef, tt.want)
			}
			// Round trip: what we write back decodes to the same value.
			data, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			var again GatewayConfigSpec
			if err := json.Unmarshal(data, &again); err != nil {
				t.Fatalf("round trip %s: %v", data, err)
			}
			if again.Password.Value != got.Value || (again.Password.SecretRef == nil) != (got.SecretRef == nil) {
				t.Fatalf("round trip changed %s", data)
			}
		})
	}
}

func TestUserNameSpellings(t *testing.T) {
	var spec GatewayConfigSpec
	if err := yaml.UnmarshalStrict([]byte("username: a\nuserName: b"), &spec); err != nil {
		t.Fatal(err)
	}
	if *spec.Username != "a" || *spec.UserName != "b" {
		t.Fatalf("got username %q userName %q", *spec.Username, *spec.UserName)
	}
}

// TestPasswordNotUTF8: a JSON string password with a byte that is not UTF-8
// is Invalid (encoding/json would have made it U+FFFD), and the reason does
// not quote it. FuzzPasswordJSON's corpus holds the same input.
func TestPasswordNotUTF8(t *testing.T) {
	for _, in := range []string{"\"pa\xffss\"", "\"\xc3\""} {
		var p Password
		if err := p.UnmarshalJSON([]byte(in)); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if p.Value != "" || p.SecretRef != nil || !strings.Contains(p.Invalid, "not valid UTF-8") || strings.Contains(p.Invalid, "pa") {
			t.Fatalf("%q: got %+v, want Invalid saying not valid UTF-8", in, p)
		}
	}
	var p Password
	if err := p.UnmarshalJSON([]byte(`"p\u00e4ss"`)); err != nil || p.Value != "päss" {
		t.Fatalf("UTF-8 password: %+v, %v", p, err)
	}
}
