package dtls

import (
	"net"
	"net/netip"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/core"
)

// TestBoundFor: Adopt takes the socket a TURN-DTLS listener on 0.0.0.0 really has ([::],
// dual-stack), which a hand-over of a hostNetwork DaemonSet pod refused before (seen on the
// real-node cluster: "handed-over socket bound to [::]:3483, not 0.0.0.0:3483").
func TestBoundFor(t *testing.T) {
	for _, tc := range []struct {
		addr string
		port int
		got  string
		want bool
	}{
		{"0.0.0.0", 3483, "[::]:3483", true},
		{"0.0.0.0", 3483, "0.0.0.0:3483", true},
		{"::", 3483, "[::]:3483", true},
		{"0.0.0.0", 3483, "[::]:3484", false},
		{"127.0.0.1", 3483, "127.0.0.1:3483", true},
		{"127.0.0.1", 3483, "[::ffff:127.0.0.1]:3483", true},
		{"127.0.0.1", 3483, "[::]:3483", false},
		{"127.0.0.1", 3483, "127.0.0.2:3483", false},
		{"0.0.0.0", 3483, "127.0.0.1:3483", false},
		{"not an address", 3483, "[::]:3483", false},
	} {
		got := netip.MustParseAddrPort(tc.got)
		if b := boundFor(got, config.Listener{Address: tc.addr, Port: tc.port}); b != tc.want {
			t.Errorf("boundFor(%s, %s:%d) = %v, want %v", tc.got, tc.addr, tc.port, b, tc.want)
		}
	}
	// What open really binds for 0.0.0.0 passes.
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	local := core.AddrPortOf(uc.LocalAddr())
	if !boundFor(local, config.Listener{Address: "0.0.0.0", Port: int(local.Port())}) {
		t.Errorf("the socket open binds for 0.0.0.0 (%s) is refused", local)
	}
}
