package mirror

import (
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// TestMode: ternd's --offload-engine wins over the config, case-insensitively,
// and a value that names no engine is refused naming the flag.
func TestMode(t *testing.T) {
	for _, tc := range []struct {
		engine, override, want, err string
	}{
		{"", "", offloadmode.Auto, ""},
		{"None", "", offloadmode.None, ""},
		{"XDP", "", offloadmode.XDP, ""},
		{"None", "tc", offloadmode.TC, ""},
		{"XDP", "none", offloadmode.None, ""},
		{"", "ebpf", "", "--offload-engine"},
	} {
		got, err := Mode(&config.Config{Offload: config.Offload{Engine: tc.engine}}, tc.override)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Mode(%q, %q): error %v, want one naming %s", tc.engine, tc.override, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Mode(%q, %q) = %q, %v; want %q", tc.engine, tc.override, got, err, tc.want)
		}
	}
}

// TestListenerAddrs: the programs are opened for the TURN-UDP listeners
// only, a wildcard listener at the relay's bind address of each family,
// and the relay's advertised addresses map to the addresses it binds.
func TestListenerAddrs(t *testing.T) {
	relay := config.Relay{Address: "10.0.0.5", PublicAddress: "203.0.113.5",
		ExtraAddresses: []config.RelayAddress{{Address: "fd00::5", PublicAddress: "2001:db8::5"}}}
	cfg := &config.Config{Listeners: []config.Listener{
		{Name: "udp", Protocol: protocol.TURNUDP, Address: "0.0.0.0", Port: 3478},
		{Name: "udp-lo", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: 3479},
		{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: 3478},
		{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: 3480},
	}}
	want := map[netip.AddrPort]string{
		netip.MustParseAddrPort("10.0.0.5:3478"):  "udp",
		netip.MustParseAddrPort("[fd00::5]:3478"): "udp",
		netip.MustParseAddrPort("127.0.0.1:3479"): "udp-lo",
	}
	if got := udpListenerAddrs(cfg, relay); !maps.Equal(got, want) {
		t.Errorf("listeners %v, want %v", got, want)
	}
	wantRelays := map[netip.Addr]netip.Addr{
		netip.MustParseAddr("10.0.0.5"): netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("203.0.113.5"): netip.MustParseAddr("10.0.0.5"),
		netip.MustParseAddr("fd00::5"): netip.MustParseAddr("fd00::5"), netip.MustParseAddr("2001:db8::5"): netip.MustParseAddr("fd00::5"),
	}
	if got := relayAddrs(relay); !maps.Equal(got, wantRelays) {
		t.Errorf("relays %v, want %v", got, wantRelays)
	}
}

// TestOpenNone: a Mirror opened with None is inactive, attaches nothing,
// and reports None.
func TestOpenNone(t *testing.T) {
	m, err := Open(offloadmode.None, "", &config.Config{}, config.Relay{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if st := m.Status(); m.Active() || st.Attached != offloadmode.None || st.Requested != offloadmode.None || st.Paths != 0 {
		t.Errorf("None: active %v, status %+v", m.Active(), st)
	}
}
