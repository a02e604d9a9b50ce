package relaybind

import (
	"log/slog"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestAddresses: a public address of this host (127.0.0.0/8 is all local)
// is bound instead of relay.address; one that is not (198.51.100.1,
// TEST-NET-2, on no interface) is only advertised. The config given is
// left as it is.
func TestAddresses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name                     string
		addr, public, wantAddr   string
		extra, extraPub, wantExt string
	}{
		{"no public address", "127.0.0.1", "", "127.0.0.1", "127.0.0.3", "", "127.0.0.3"},
		{"public address not this host's", "127.0.0.1", "198.51.100.1", "127.0.0.1", "127.0.0.3", "198.51.100.2", "127.0.0.3"},
		{"public address this host's", "127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.4"},
		{"public address the bound one", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.3", "127.0.0.3", "127.0.0.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := config.Relay{Address: tc.addr, PublicAddress: tc.public,
				ExtraAddresses: []config.RelayAddress{{Address: tc.extra, PublicAddress: tc.extraPub}}}
			got := Addresses(r, log)
			if got.Address != tc.wantAddr || got.PublicAddress != tc.public {
				t.Errorf("binds %s advertising %s, want %s advertising %s", got.Address, got.PublicAddress, tc.wantAddr, tc.public)
			}
			if got.ExtraAddresses[0].Address != tc.wantExt || got.ExtraAddresses[0].PublicAddress != tc.extraPub {
				t.Errorf("extra address binds %s advertising %s, want %s advertising %s", got.ExtraAddresses[0].Address, got.ExtraAddresses[0].PublicAddress, tc.wantExt, tc.extraPub)
			}
			if r.Address != tc.addr || r.ExtraAddresses[0].Address != tc.extra {
				t.Errorf("the config given changed: %+v", r)
			}
		})
	}
}
