package stunnerdconf

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// ParseTURNURI makes a config from stunnerd's positional argument
// "turn://user:pass@address:port?transport=udp", as stunnerd does: one
// listener named default-listener and static credentials. A secret alone
// ("turn://secret@...") selects ephemeral credentials. The result has
// Tern's defaults applied and is validated, through config.Prepare as
// config.Parse does.
func ParseTURNURI(s string, getenv func(string) string) (*config.Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse's error quotes the whole URI, password included.
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("turn URI: %w", err)
	}
	// Errors name the URI with its password masked: they are logged.
	s = u.Redacted()
	if u.Scheme != "turn" {
		return nil, fmt.Errorf("turn URI %q: scheme must be turn://", s)
	}
	if u.User == nil {
		return nil, fmt.Errorf("turn URI %q: no credentials: want turn://user:password@address:port", s)
	}
	port := stunnerdDefaultPort
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("turn URI %q: port: %v", s, err)
		}
	}
	proto := protocol.TURNUDP
	if t := u.Query().Get("transport"); t != "" {
		proto = protocol.Protocol("TURN-" + strings.ToUpper(t))
	}
	c := &config.Config{
		Version:   config.Version,
		Listeners: []config.Listener{{Name: "default-listener", Protocol: proto, Address: u.Hostname(), Port: port}},
	}
	if pw, ok := u.User.Password(); ok {
		c.Auth = config.Auth{Type: config.AuthStatic, Username: u.User.Username(), Password: pw}
	} else {
		c.Auth = config.Auth{Type: config.AuthEphemeral, SharedSecret: u.User.Username()}
	}
	// stunnerd's default config lets clients reach any peer.
	c.Clusters = []config.Cluster{{Name: "default-cluster", Endpoints: []string{"0.0.0.0/0", "::/0"}}}
	c.Listeners[0].Routes = []string{"default-cluster"}
	if err := c.Prepare(getenv); err != nil {
		if isFieldErrors(err) {
			return nil, fmt.Errorf("turn URI %q: %w", s, err)
		}
		return nil, fmt.Errorf("turn URI: %w", err)
	}
	return c, nil
}
