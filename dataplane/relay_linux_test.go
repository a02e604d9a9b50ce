package dataplane

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/turn"
)

// TestDontFragmentSetsDF checks that DONT-FRAGMENT reaches the relay socket
// as path-MTU discovery "do" mode, which sets DF on every datagram.
func TestDontFragmentSetsDF(t *testing.T) {
	for _, df := range []bool{false, true} {
		srv, _ := startServer(t, 29960, 29969)
		a := &turn.Allocation{Transport: &udpListener{}}
		r, _, err := srv.relays.Allocate(a, turn.RelayRequest{DontFragment: df})
		if err != nil {
			t.Fatal(err)
		}
		mode, err := unix.GetsockoptInt(r.(*relay).sock.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER)
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
	srv, _ := startServer(t, 29950, 29959)
	a := &turn.Allocation{Transport: &udpListener{}}
	r, token, err := srv.relays.Allocate(a, turn.RelayRequest{EvenPort: true, ReservePair: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Addr().Port()%2 != 0 || token == 0 {
		t.Fatalf("even port %v token %x", r.Addr(), token)
	}
	r2, _, err := srv.relays.Allocate(a, turn.RelayRequest{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Addr() != netip.AddrPortFrom(r.Addr().Addr(), r.Addr().Port()+1) {
		t.Errorf("reserved port %v, want %v+1", r2.Addr(), r.Addr())
	}
	if _, _, err := srv.relays.Allocate(a, turn.RelayRequest{Token: token}); err != turn.ErrNoCapacity {
		t.Errorf("token used twice: %v", err)
	}
}
