package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvalidUTF8Credentials: a credential that is not UTF-8 is refused
// with an error naming the field (or the line), wherever it is read: a
// config file, a config built in Go, and a credential file (the turn://
// URI and stunnerd config cases are in dataplane/stunnerdconf). The value itself
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
}
