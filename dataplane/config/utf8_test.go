package config

import (
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// TestInvalidUTF8Credentials: a credential that is not UTF-8 is refused
// with an error naming the field (or the line), wherever it is read: here
// a config file and a config built in Go (the credential file cases are in
// dataplane/secretfile, the turn:// URI and stunnerd config cases in
// dataplane/stunnerdconf). The value itself never appears in the error.
func TestInvalidUTF8Credentials(t *testing.T) {
	const bad = "pa\xffss"
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
				Listeners: []Listener{{Name: "udp", Protocol: protocol.TURNUDP, Port: 3478}}}
			c.SetDefaults()
			return c.Validate()
		}, "auth.sharedSecret"},
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
