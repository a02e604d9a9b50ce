package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestInvalidUTF8 reads a credential file that is not UTF-8 as a password
// and as a shared secret: the error names the field, the path and UTF-8,
// and never shows the credential, as config.Validate's does for an inline
// one (config's TestInvalidUTF8Credentials).
func TestInvalidUTF8(t *testing.T) {
	const bad = "pa\xffss"
	badFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(badFile, []byte(bad+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		auth config.Auth
		want string
	}{
		{"password file", config.Auth{Type: config.AuthStatic, Username: "u", PasswordFile: badFile}, "auth.passwordFile: " + badFile + " is not valid UTF-8"},
		{"shared secret file", config.Auth{Type: config.AuthEphemeral, SharedSecretFile: badFile}, "auth.sharedSecretFile: " + badFile + " is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(tc.auth, os.ReadFile)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("error %v, want one naming %q and UTF-8", err, tc.want)
			}
			if strings.Contains(err.Error(), "\xff") {
				t.Errorf("the error shows the credential: %v", err)
			}
		})
	}
}
