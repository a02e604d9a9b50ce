package relay

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// streamClient is a Client of a connection transport, for pool tests.
type streamClient struct{}

func (streamClient) PeerCluster(netip.AddrPort) (uint32, bool)           { return 0, true }
func (streamClient) BatchSocket(int) (fd int, st *stats.Worker, ok bool) { return -1, nil, false }
func (streamClient) WriteToClient([]byte)                                {}
func (streamClient) QueueToClient(int, []byte) bool                      { return false }
func (streamClient) FlushToClient(int)                                   {}

func newTestPool(t *testing.T, minPort, maxPort int) *Pool {
	t.Helper()
	p, err := NewPool(config.Relay{Address: "127.0.0.1", MinPort: minPort, MaxPort: maxPort}, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(nil) // no datagram reaches these relays, so no engine is needed
	t.Cleanup(p.Close)
	return p
}

// TestDontFragmentSetsDF checks that DONT-FRAGMENT reaches the relay socket
// as path-MTU discovery "do" mode, which sets DF on every datagram.
func TestDontFragmentSetsDF(t *testing.T) {
	p := newTestPool(t, 29960, 29969)
	for _, df := range []bool{false, true} {
		a := &turn.Allocation{Transport: streamClient{}}
		r, _, err := p.Allocate(a, turn.RelayRequest{DontFragment: df})
		if err != nil {
			t.Fatal(err)
		}
		mode, err := unix.GetsockoptInt(r.Socket(), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER)
		if err != nil {
			t.Fatal(err)
		}
		if got := mode == unix.IP_PMTUDISC_DO; got != df {
			t.Errorf("DONT-FRAGMENT=%v: IP_MTU_DISCOVER = %d", df, mode)
		}
		r.Close()
	}
}

func TestEvenPortReservation(t *testing.T) {
	p := newTestPool(t, 29950, 29959)
	a := &turn.Allocation{Transport: streamClient{}}
	r, token, err := p.Allocate(a, turn.RelayRequest{EvenPort: true, ReservePair: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Addr().Port()%2 != 0 || token == 0 {
		t.Fatalf("even port %v token %x", r.Addr(), token)
	}
	// Only the client IP and user that reserved the port may claim it.
	for _, thief := range []turn.RelayRequest{
		{Token: token, Client: turn.FiveTuple{Client: netip.MustParseAddrPort("127.0.0.2:1")}},
		{Token: token, Username: "mallory"},
	} {
		if _, _, err := p.Allocate(a, thief); err != turn.ErrNoCapacity {
			t.Errorf("claim by %v %q: %v, want ErrNoCapacity", thief.Client.Client, thief.Username, err)
		}
	}
	r2, _, err := p.Allocate(a, turn.RelayRequest{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Addr() != netip.AddrPortFrom(r.Addr().Addr(), r.Addr().Port()+1) {
		t.Errorf("reserved port %v, want %v+1", r2.Addr(), r.Addr())
	}
	if _, _, err := p.Allocate(a, turn.RelayRequest{Token: token}); err != turn.ErrNoCapacity {
		t.Errorf("token used twice: %v", err)
	}
}

// TestTransportMustTakeRelayedData: an allocation whose transport cannot
// take relayed data gets no relay (instead of a relay that drops all).
func TestTransportMustTakeRelayedData(t *testing.T) {
	p := newTestPool(t, 29940, 29949)
	if _, _, err := p.Allocate(&turn.Allocation{Transport: allowAll{}}, turn.RelayRequest{}); err == nil {
		t.Fatal("relay allocated for a transport that is no Client")
	}
}

type allowAll struct{}

func (allowAll) PeerCluster(netip.AddrPort) (uint32, bool) { return 0, true }

// TestDescriptorTableGrows: relays filed past the end of a worker's table
// are found again, and cleared entries are gone.
func TestDescriptorTableGrows(t *testing.T) {
	p := newTestPool(t, 29930, 29939)
	w := p.io.ws[0]
	rs := []*Relay{{}, {}, {}}
	w.mu.Lock()
	w.setRelay(3, rs[0])
	w.setRelay(700, rs[1])
	w.setRelay(5000, rs[2])
	w.setRelay(700, nil)
	w.setRelay(9000, nil) // clearing past the end does not grow
	w.mu.Unlock()
	if w.relay(3) != rs[0] || w.relay(700) != nil || w.relay(5000) != rs[2] || w.relay(9000) != nil || w.relay(-1) != nil {
		t.Error("table lookups disagree with what was filed")
	}
	if n := len(*w.relays.Load()); n > 2*5001 {
		t.Errorf("table of %d entries for descriptor 5000", n)
	}
	w.mu.Lock() // these relays have no sockets for Close to close
	w.setRelay(3, nil)
	w.setRelay(5000, nil)
	w.mu.Unlock()
}
