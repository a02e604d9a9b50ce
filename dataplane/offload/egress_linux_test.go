package offload

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// podTopo is a pod's view: the tern namespace has one interface, t0
// (10.0.3.1/24, fd00:3::1/64), a default route through the other end
// (10.0.3.2, fd00:3::2) and forwarding off, as in a pod whose CNI leaves
// it so. The client (10.0.1.2, fd00:1::2) and the peer (10.0.2.2,
// fd00:2::2) live in the "network" namespace beyond it, where forwarding
// is off too: they are its own addresses.
type podTopo struct{ tern, net, ternIf, netIf string }

func newPodTopo(t testing.TB) podTopo {
	t.Helper()
	requireRoot(t)
	u := uniq()
	tp := podTopo{tern: newNetns(t, u+"t"), net: newNetns(t, u+"n"), ternIf: u + "t0", netIf: u + "n0"}
	// The client's and peer's addresses are on lo, so neighbour
	// solicitations go from the veths' link-local addresses: no DAD, so
	// that they work at once (these namespaces' own settings).
	// A new namespace takes IPv4 forwarding from the host's: set it off.
	for _, ns := range []string{tp.tern, tp.net} {
		run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0")
		run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=0")
	}
	run(t, "ip", "link", "add", tp.ternIf, "netns", tp.tern, "type", "veth", "peer", "name", tp.netIf, "netns", tp.net)
	run(t, "ip", "-n", tp.tern, "addr", "add", "10.0.3.1/24", "dev", tp.ternIf)
	run(t, "ip", "-n", tp.tern, "addr", "add", "fd00:3::1/64", "dev", tp.ternIf, "nodad")
	run(t, "ip", "-n", tp.net, "addr", "add", "10.0.3.2/24", "dev", tp.netIf)
	run(t, "ip", "-n", tp.net, "addr", "add", "fd00:3::2/64", "dev", tp.netIf, "nodad")
	for _, a := range []string{"10.0.1.2/32", "10.0.2.2/32", "fd00:1::2/128", "fd00:2::2/128"} {
		run(t, "ip", "-n", tp.net, "addr", "add", a, "dev", "lo")
	}
	run(t, "ip", "-n", tp.tern, "link", "set", tp.ternIf, "up")
	run(t, "ip", "-n", tp.net, "link", "set", tp.netIf, "up")
	run(t, "ip", "-n", tp.tern, "route", "add", "default", "via", "10.0.3.2")
	run(t, "ip", "-n", tp.tern, "-6", "route", "add", "default", "via", "fd00:3::2")
	// Resolve the neighbours both ways before the test begins: a datagram
	// sent while the link is still coming up can be lost.
	for _, pair := range [][2]string{{"10.0.3.2:29990", "10.0.3.1:29991"}, {"[fd00:3::2]:29990", "[fd00:3::1]:29991"}} {
		n, tn := listen(t, tp.net, pair[0]), listen(t, tp.tern, pair[1])
		testenv.Eventually(t, 20*time.Second, func() error {
			if _, err := n.WriteToUDPAddrPort([]byte("warm"), netip.MustParseAddrPort(pair[1])); err != nil {
				return err
			}
			_ = tn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, _, err := tn.ReadFromUDPAddrPort(make([]byte, 16)); err != nil {
				return err
			}
			if _, err := tn.WriteToUDPAddrPort([]byte("warm"), netip.MustParseAddrPort(pair[0])); err != nil {
				return err
			}
			_ = n.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, _, err := n.ReadFromUDPAddrPort(make([]byte, 16))
			return err
		})
		n.Close()
		tn.Close()
	}
	return tp
}

// TestSameInterface relays in a pod-like namespace with forwarding off,
// where packets leave by the interface they came in on: Auto attaches tc
// in same-interface mode (no FIB lookup, so no forwarding check), by
// tcx and by clsact, both families, and a peer that is this namespace's
// own address gets the packet up the stack.
func TestSameInterface(t *testing.T) {
	for _, attach := range []Attach{AttachTCX, AttachClsact} {
		for _, fam := range []struct {
			name  string
			a     addrSet
			local string // a peer on the tern namespace's own address
		}{
			{"IPv4", addrSet{"10.0.1.2:29001", "10.0.3.1:29100", "10.0.3.1:29200", "10.0.2.2:29002"}, "10.0.3.1:29300"},
			{"IPv6", addrSet{"[fd00:1::2]:29001", "[fd00:3::1]:29100", "[fd00:3::1]:29200", "[fd00:2::2]:29002"}, "[fd00:3::1]:29300"},
		} {
			t.Run(string(attach)+"/"+fam.name, func(t *testing.T) {
				a := fam.a
				tp := newPodTopo(t)
				listener := listen(t, tp.tern, a.listener)
				listen(t, tp.tern, a.relay)
				client := listen(t, tp.net, a.client)
				peer := listen(t, tp.net, a.peer)
				o := openIn(t, tp.tern, Config{Mode: Auto, Attach: attach,
					Listeners: []netip.AddrPort{netip.MustParseAddrPort(a.listener)},
					Relays:    []netip.Addr{netip.MustParseAddrPort(a.relay).Addr()}})
				m := o.InterfaceModes()
				if len(m) != 1 || m[tp.ternIf].Egress != EgressSameInterface || m[tp.ternIf].Hook != TC ||
					m[tp.ternIf].Attach != map[Attach]string{AttachTCX: "tcx", AttachClsact: "clsact"}[attach] {
					t.Fatalf("modes %+v, want %s only, tc, same_interface", m, tp.ternIf)
				}
				t.Logf("%s: %+v", tp.ternIf, m[tp.ternIf])
				if err := o.Put(a.path(time.Now().Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
				relayRounds(t, a, client, peer, 10)

				// A peer at this namespace's own address: the packet
				// passes untouched to the listener's socket (relayed
				// up the stack from a non-loopback interface, its local
				// source address would be martian).
				lp := a
				lp.peer = fam.local
				p := lp.path(time.Now().Add(time.Hour))
				p.Channel = 0x4002
				if err := o.Put(p); err != nil {
					t.Fatal(err)
				}
				toLocal := channelData(0x4002, []byte("to a local peer"), 1)
				send(t, client, a.listener, toLocal)
				expect(t, "client->local peer", listener, toLocal, a.client)

				// The sockets saw none of it.
				send(t, client, a.listener, stunBinding)
				expect(t, "STUN", listener, stunBinding, a.client)
				var got Counters
				o.Counters(func(_ uint32, c Counters) { got = c })
				if got.ClientToPeerPackets != 10 || got.PeerToClientPackets != 10 {
					t.Errorf("counters %+v, want 10 each way", got)
				}
				if s := o.Stats(); s.ForwardingDisabled != 0 || s.NoRoute != 0 {
					t.Errorf("stats %+v", s)
				}
			})
		}
	}
}

// TestSameInterfaceMTU: in same-interface mode the program checks the
// interface's MTU itself (there is no FIB lookup to do it).
func TestSameInterfaceMTU(t *testing.T) {
	tp := newPodTopo(t)
	run(t, "ip", "-n", tp.tern, "link", "set", tp.ternIf, "mtu", "1300")
	a := addrSet{"10.0.1.2:29001", "10.0.3.1:29100", "10.0.3.1:29200", "10.0.2.2:29002"}
	listen(t, tp.tern, a.listener)
	relay := listen(t, tp.tern, a.relay)
	client := listen(t, tp.net, a.client)
	peer := listen(t, tp.net, a.peer)
	o := openIn(t, tp.tern, Config{Mode: TC, Interfaces: []string{tp.ternIf}})
	if err := o.Put(a.path(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	fits := bytes.Repeat([]byte{1}, 1300-28-4)
	send(t, peer, a.relay, fits)
	expect(t, "fits", client, channelData(0x4001, fits, 0), a.listener)
	over := bytes.Repeat([]byte{2}, 1300-28-3)
	send(t, peer, a.relay, over)
	expect(t, "over the MTU", relay, over, a.peer)
	if s := o.Stats(); s.TooBig != 1 {
		t.Errorf("stats %+v, want TooBig 1", s)
	}
}

// TestTwoInterfacesNeedForwarding: where forwarding is off and routes
// leave by more than one interface, the egress may differ from the
// arrival interface and only the FIB could say: Auto attaches nothing
// (ErrUnsupported), and once forwarding is on it takes the FIB on both.
func TestTwoInterfacesNeedForwarding(t *testing.T) {
	tp := newTopo(t)
	run(t, "ip", "netns", "exec", tp.tern, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=0")
	cfg := Config{Mode: Auto, Listeners: []netip.AddrPort{netip.MustParseAddrPort(listenerAddr)},
		Relays: []netip.Addr{netip.MustParseAddrPort(relayAddr).Addr()}}
	err := inNetns(t, tp.tern, func() error {
		o, err := Open(cfg)
		if err == nil {
			o.Close()
		}
		return err
	})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("forwarding off")) {
		t.Fatalf("Auto, forwarding off, two routed interfaces: %v, want ErrUnsupported naming forwarding", err)
	}
	t.Logf("%v", err)
	run(t, "ip", "netns", "exec", tp.tern, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1")
	o := openIn(t, tp.tern, cfg)
	for ifn, m := range o.InterfaceModes() {
		if m.Egress != EgressFIB {
			t.Errorf("%s: %+v, want fib", ifn, m)
		}
	}
}
