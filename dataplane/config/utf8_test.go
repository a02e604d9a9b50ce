package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvalidUTF8Credentials: a credential that is not UTF-8 is refused
// with an error naming the field (or the line), wherever it is read: a
// turn:// URI (FuzzParseTURNURI found that such a password came back as
// U+FFFD after the config's JSON round trip), a config file, a stunnerd
// config, a placeholder's value, and a credential file. The value itself
// never appears in the error.
func TestInvalidUTF8Credentials(t *testing.T) {
	const bad = "pa\xffss"
	dir := t.TempDir()
	badFile := filepath.Join(dir, "password")
	if err := os.WriteFile(badFile, []byte(bad+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listener := "listeners: [{name: udp, protocol: TURN-UDP, port: 3478}]\n"
	for _, tc := range []struct {
		name  string
		parse func() error
		want  string
	}{
		{"turn URI password, percent-encoded", func() error { _, err := ParseTURNURI("turn://user:pa%FFss@127.0.0.1:3478", nil); return err }, "auth.password"},
		{"turn URI user, percent-encoded", func() error { _, err := ParseTURNURI("turn://us%FEer:pass@127.0.0.1:3478", nil); return err }, "auth.username"},
		{"turn URI shared secret, percent-encoded", func() error { _, err := ParseTURNURI("turn://s%FFcret@127.0.0.1:3478", nil); return err }, "auth.sharedSecret"},
		{"config file", func() error {
			_, err := Parse([]byte("version: v1\nauth: {type: static, username: u, password: \""+bad+"\"}\n"+listener), nil)
			return err
		}, "line 2, column 48"},
		{"config built in Go (the operator's render, ternd -f)", func() error {
			c := &Config{Version: Version, Auth: Auth{Type: AuthEphemeral, SharedSecret: bad},
				Listeners: []Listener{{Name: "udp", Protocol: ProtoTURNUDP, Port: 3478}}}
			c.SetDefaults()
			return c.Validate()
		}, "auth.sharedSecret"},
		{"stunnerd config", func() error {
			_, _, err := ParseStunnerd([]byte("version: v1\nauth:\n  credentials: {username: u, password: \""+bad+"\"}\n"+listener), StunnerdOptions{})
			return err
		}, "line 3, column"},
		{"password file", func() error {
			_, err := Auth{Type: AuthStatic, Username: "u", PasswordFile: badFile}.ReadSecretFiles(os.ReadFile)
			return err
		}, "auth.passwordFile: " + badFile + " is not valid UTF-8"},
		{"shared secret file", func() error {
			_, err := Auth{Type: AuthEphemeral, SharedSecretFile: badFile}.ReadSecretFiles(os.ReadFile)
			return err
		}, "auth.sharedSecretFile: " + badFile + " is not valid UTF-8"},
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
