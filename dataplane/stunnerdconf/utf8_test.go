package stunnerdconf

import (
	"strings"
	"testing"
)

// TestInvalidUTF8Credentials: a credential that is not UTF-8 is refused
// with an error naming the field (or the line) in a turn:// URI
// (FuzzParseTURNURI found that such a password came back as U+FFFD after
// the config's JSON round trip) and in a stunnerd config. The value itself
// never appears in the error.
func TestInvalidUTF8Credentials(t *testing.T) {
	const bad = "pa\xffss"
	listener := "listeners: [{name: udp, protocol: TURN-UDP, port: 3478}]\n"
	for _, tc := range []struct {
		name  string
		parse func() error
		want  string
	}{
		{"turn URI password, percent-encoded", func() error { _, err := ParseTURNURI("turn://user:pa%FFss@127.0.0.1:3478", nil); return err }, "auth.password"},
		{"turn URI user, percent-encoded", func() error { _, err := ParseTURNURI("turn://us%FEer:pass@127.0.0.1:3478", nil); return err }, "auth.username"},
		{"turn URI shared secret, percent-encoded", func() error { _, err := ParseTURNURI("turn://s%FFcret@127.0.0.1:3478", nil); return err }, "auth.sharedSecret"},
		{"stunnerd config", func() error {
			_, _, err := Parse([]byte("version: v1\nauth:\n  credentials: {username: u, password: \""+bad+"\"}\n"+listener), Options{})
			return err
		}, "line 3, column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("error %v, want one naming %q and UTF-8", err, tc.want)
			}
			if strings.Contains(err.Error(), "\xff") || strings.Contains(err.Error(), "pa") && strings.Contains(err.Error(), "ss@") {
				t.Errorf("the error shows the credential: %v", err)
			}
		})
	}
	// Valid UTF-8 beyond ASCII is a credential like any other.
	c, err := ParseTURNURI("turn://us%C3%A9r:p%C3%A4ss@127.0.0.1:3478", nil)
	if err != nil || c.Auth.Username != "usér" || c.Auth.Password != "päss" {
		t.Fatalf("UTF-8 credentials: %+v, %v", c, err)
	}
}
