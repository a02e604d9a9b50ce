package mirror

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/turn"
)

// This file drives the TURN engine on a manual clock with the offload
// Mirror and the real kernel programs as its PathObserver, in a network
// namespace of the test's own (testenv.InFreshNetns), so that expiry can be tested
// without waiting 300 s: every way a path stops must stop the kernel
// relaying it from the very next packet, which then reaches the socket
// the engine would read instead.

// udpRelay is a relay socket for the engine: a real UDP socket that owns
// the port, which nobody reads; what the kernel does not relay lands in it.
// The engine's Close leaves it open until the test ends, so that a
// datagram to a deleted allocation's port still lands somewhere to see.
type udpRelay struct{ c *net.UDPConn }

func (r udpRelay) Addr() netip.AddrPort { return r.c.LocalAddr().(*net.UDPAddr).AddrPort() }
func (r udpRelay) Close() error         { return nil }
func (r udpRelay) Socket() int          { return -1 }

type udpRelays struct {
	t    *testing.T
	last atomic.Pointer[net.UDPConn]
}

func (u *udpRelays) Allocate(_ *turn.Allocation, _ turn.RelayRequest) (turn.Relay, uint64, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.99.1")})
	if err != nil {
		return nil, 0, err
	}
	u.t.Cleanup(func() { c.Close() })
	u.last.Store(c)
	return udpRelay{c}, 0, nil
}

// switchable allows every peer until denied.
type switchable struct{ denied atomic.Bool }

func (s *switchable) PeerCluster(netip.AddrPort) (uint32, bool) { return 1, !s.denied.Load() }

// pathRig is one client, one peer and the engine between them.
type pathRig struct {
	t                *testing.T
	e                *turn.Engine
	clock            *turn.ManualClock
	mirror           *Mirror
	tr               *switchable
	client, listener *net.UDPConn
	peer             *net.UDPConn
	relays           *udpRelays
	relay            *net.UDPConn
	ft               turn.FiveTuple
	nonce            string
}

func udp4(t *testing.T, ip string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newPathRig(t *testing.T) *pathRig {
	t.Helper()
	r := &pathRig{t: t, clock: turn.NewManualClock(time.Now()), tr: &switchable{}, relays: &udpRelays{t: t}}
	r.client, r.listener, r.peer = udp4(t, "127.0.0.1"), udp4(t, "127.0.0.1"), udp4(t, "127.0.0.1")
	laddr := r.listener.LocalAddr().(*net.UDPAddr).AddrPort()
	cfg := &config.Config{
		Listeners: []config.Listener{{Name: "udp", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: int(laddr.Port())}},
		Relay:     config.Relay{Address: "127.0.99.1"},
	}
	m, err := Open(offloadmode.TC, "", cfg, cfg.Relay, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Active() {
		t.Fatalf("offload did not attach as root in a namespace of its own")
	}
	t.Cleanup(m.Close)
	r.mirror = m
	r.e, err = turn.New(turn.Config{
		Settings:     turn.Settings{Realm: "r", Auth: turn.StaticAuth{Username: "u", Password: "p"}, MaxLifetime: time.Hour},
		Relays:       r.relays,
		Clock:        r.clock,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		PathObserver: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.e.Close)
	r.ft = turn.FiveTuple{Client: r.client.LocalAddr().(*net.UDPAddr).AddrPort(), Server: laddr, Proto: turn.ProtoUDP}
	return r
}

// do sends a request to the engine, signed once the nonce is known, and
// fails the test unless it succeeds.
func (r *pathRig) do(method stun.Method, attrs ...stun.Setter) {
	r.t.Helper()
	for range 2 {
		s := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
		if r.nonce != "" {
			s = append(s, stun.NewUsername("u"), stun.NewRealm("r"), stun.NewNonce(r.nonce), stun.NewLongTermIntegrity("u", "r", "p"), stun.Fingerprint)
		}
		m, err := stun.Build(s...)
		if err != nil {
			r.t.Fatal(err)
		}
		var res turn.Result
		r.e.HandleClient(r.tr, r.ft, m.Raw, &res)
		reply := &stun.Message{Raw: res.Reply}
		if err := reply.Decode(); err != nil {
			r.t.Fatalf("%v: no reply (%v)", method, err)
		}
		if reply.Type.Class == stun.ClassSuccessResponse {
			return
		}
		var n stun.Nonce
		if n.GetFrom(reply) != nil {
			r.t.Fatalf("%v refused: %v", method, reply)
		}
		r.nonce = string(n)
	}
	r.t.Fatalf("%v refused twice", method)
}

func (r *pathRig) peerAddr() netip.AddrPort { return r.peer.LocalAddr().(*net.UDPAddr).AddrPort() }

type peerXOR netip.AddrPort

func (x peerXOR) AddTo(m *stun.Message) error {
	a := netip.AddrPort(x)
	return (&stun.XORMappedAddress{IP: a.Addr().AsSlice(), Port: int(a.Port())}).AddToAs(m, stun.AttrXORPeerAddress)
}

func chanNum(n uint16) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(n >> 8), byte(n), 0, 0}}
}

func lifetime(s uint32) stun.Setter {
	v := make([]byte, 4)
	binary.BigEndian.PutUint32(v, s)
	return stun.RawAttribute{Type: stun.AttrLifetime, Value: v}
}

// allocate makes the allocation and binds channel 0x4001 to the peer.
func (r *pathRig) allocate() {
	r.t.Helper()
	r.do(stun.MethodAllocate, stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}})
	r.relay = r.relays.last.Load()
	r.do(stun.MethodChannelBind, chanNum(0x4001), peerXOR(r.peerAddr()))
}

// recvOn reads one datagram from c before its read deadline, or returns nil.
func recvOn(c *net.UDPConn) []byte {
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// toPeer sends ChannelData with payload and reports whether the kernel
// relayed it (the peer got the payload) or it reached the listener's
// socket as it was sent; anything else fails the test.
func (r *pathRig) toPeer(payload string) bool {
	r.t.Helper()
	cd := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0x4001), uint16(len(payload)))
	cd = append(cd, payload...)
	if _, err := r.client.WriteToUDPAddrPort(cd, r.ft.Server); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	_, _ = r.peer.SetReadDeadline(deadline), r.listener.SetReadDeadline(deadline)
	got := make(chan []byte, 2)
	go func() { got <- recvOn(r.peer) }()
	go func() { got <- recvOn(r.listener) }()
	stop := func() { _ = r.peer.SetReadDeadline(time.Now()); _ = r.listener.SetReadDeadline(time.Now()); <-got }
	for range 2 {
		b := <-got
		switch {
		case b == nil:
		case string(b) == payload:
			stop()
			return true
		case string(b) == string(cd):
			stop()
			return false
		default:
			r.t.Fatalf("unexpected datagram %q", b)
		}
	}
	r.t.Fatalf("%q reached neither the peer nor the listener", payload)
	return false
}

// fromPeer sends payload from the peer to the relay address and reports
// whether the kernel relayed it to the client as ChannelData, or it
// reached the relay socket untouched.
func (r *pathRig) fromPeer(payload string) bool {
	r.t.Helper()
	if _, err := r.peer.WriteToUDPAddrPort([]byte(payload), r.relay.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	_, _ = r.client.SetReadDeadline(deadline), r.relay.SetReadDeadline(deadline)
	got := make(chan []byte, 2)
	go func() { got <- recvOn(r.client) }()
	go func() { got <- recvOn(r.relay) }()
	stop := func() { _ = r.client.SetReadDeadline(time.Now()); _ = r.relay.SetReadDeadline(time.Now()); <-got }
	for range 2 {
		b := <-got
		switch {
		case b == nil:
		case len(b) == 4+len(payload) && binary.BigEndian.Uint16(b) == 0x4001 && string(b[4:]) == payload:
			stop()
			return true
		case string(b) == payload:
			stop()
			return false
		default:
			r.t.Fatalf("unexpected datagram %q", b)
		}
	}
	r.t.Fatalf("%q reached neither the client nor the relay socket", payload)
	return false
}

// relayed checks both directions relay in the kernel (want) or not.
func (r *pathRig) relayed(stage string, want bool) {
	r.t.Helper()
	if got := r.toPeer(stage + " to peer"); got != want {
		r.t.Errorf("%s: client to peer relayed in the kernel: %v, want %v", stage, got, want)
	}
	if got := r.fromPeer(stage + " from peer"); got != want {
		r.t.Errorf("%s: peer to client relayed in the kernel: %v, want %v", stage, got, want)
	}
}

// TestOffloadPathsStop: on the engine's manual clock with the real
// programs, a channel relays in the kernel once bound, and each way it
// stops (permission expiry, binding expiry, allocation expiry, Refresh 0,
// a route change, Close) stops the kernel from the next packet on.
func TestOffloadPathsStop(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	requireOffloadRoot(t)
	advance := func(r *pathRig, d time.Duration) {
		r.clock.Advance(d)
		r.e.Sweep()
	}
	for _, tc := range []struct {
		name string
		stop func(r *pathRig)
	}{
		{"permission expires", func(r *pathRig) {
			advance(r, 200*time.Second) // binding t+800, permission t+500
			r.do(stun.MethodChannelBind, chanNum(0x4001), peerXOR(r.peerAddr()))
			advance(r, 200*time.Second)
			r.relayed("t+400", true)
			advance(r, 101*time.Second) // t+501: the permission is over, the binding and the allocation live
		}},
		{"binding expires", func(r *pathRig) {
			r.do(stun.MethodRefresh, lifetime(3600))
			for range 2 {
				advance(r, 200*time.Second)
				r.do(stun.MethodCreatePermission, peerXOR(r.peerAddr()))
			}
			r.relayed("t+400", true) // binding t+600, permission t+700
			advance(r, 201*time.Second)
		}},
		{"allocation expires", func(r *pathRig) {
			advance(r, 400*time.Second) // the permission went at t+300
			r.relayed("t+400, permission gone", false)
			r.do(stun.MethodChannelBind, chanNum(0x4001), peerXOR(r.peerAddr()))
			r.relayed("t+400, bound again", true) // allocation t+600 comes first
			advance(r, 201*time.Second)
		}},
		{"refresh 0", func(r *pathRig) { r.do(stun.MethodRefresh, lifetime(0)) }},
		{"route removed", func(r *pathRig) {
			r.tr.denied.Store(true)
			r.e.Revalidate()
		}},
		{"close", func(r *pathRig) { r.e.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPathRig(t)
			r.allocate()
			r.relayed("bound", true)
			tc.stop(r)
			r.relayed("stopped", false)
			if n := r.mirror.Status().Paths; n != 0 {
				t.Errorf("%d paths still installed", n)
			}
		})
	}
}

// requireOffloadRoot skips (under CI, fails) a run without root: the
// programs need BPF and a network namespace of the test's own.
func requireOffloadRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "offload path tests need root (BPF, a network namespace of their own)")
	}
}

// TestOffloadReopen: a reconfiguration that adds a listener reopens the
// programs for the new set; the paths the engine reported go back in and
// keep relaying in the kernel, and the kernel's counts carry on from
// before the reopen.
func TestOffloadReopen(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	requireOffloadRoot(t)
	r := newPathRig(t)
	r.allocate()
	r.relayed("before", true)
	count := func() uint64 {
		k := map[string]*stats.Sum{}
		r.mirror.Fold(k)
		if k["udp"] == nil {
			return 0
		}
		return k["udp"].PeerTx + k["udp"].PeerRx
	}
	before := count()
	if before != 2 {
		t.Errorf("kernel counted %d packets, want 2", before)
	}
	extra := udp4(t, "127.0.0.2")
	cfg := &config.Config{
		Listeners: []config.Listener{
			{Name: "udp", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: int(r.ft.Server.Port())},
			{Name: "udp2", Protocol: protocol.TURNUDP, Address: "127.0.0.2", Port: extra.LocalAddr().(*net.UDPAddr).Port},
		},
		Relay: config.Relay{Address: "127.0.99.1"},
	}
	r.mirror.SetListeners(cfg, cfg.Relay)
	if !r.mirror.Active() {
		t.Fatal("reopen failed")
	}
	if n := r.mirror.Status().Paths; n != 1 {
		t.Errorf("%d paths installed after the reopen, want 1", n)
	}
	r.relayed("after", true)
	if after := count(); after != before+2 {
		t.Errorf("kernel counted %d after the reopen, want %d", after, before+2)
	}
}

// TestOffloadPutFailure: a path the kernel cannot take (here its client
// and peer are IPv4 and its listener and relay IPv6, which no program
// relays) is counted and left to the socket path, and its PathDown is no
// error. (A dual allocation's path from a client of one family to a peer
// of the other is not tried at all: TestOffloadSkipsCrossFamilyPaths.)
func TestOffloadPutFailure(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	requireOffloadRoot(t)
	r := newPathRig(t)
	ev := turn.PathEvent{
		FiveTuple: turn.FiveTuple{Client: netip.MustParseAddrPort("127.0.0.1:5000"), Server: netip.MustParseAddrPort("[::1]:3478"), Proto: turn.ProtoUDP},
		Relay:     netip.MustParseAddrPort("[::1]:6000"), Peer: netip.MustParseAddrPort("127.0.0.1:7000"),
		Channel: 0x4001, Expires: time.Now().Add(time.Minute).UnixNano(), Cluster: 1,
	}
	r.mirror.mu.Lock()
	r.mirror.listeners[ev.FiveTuple.Server] = "udp6" // as if a listener were there
	r.mirror.mu.Unlock()
	r.mirror.PathUp(ev)
	if st := r.mirror.Status(); st.Paths != 0 || st.PutErrors != 1 {
		n, fails := st.Paths, st.PutErrors
		t.Errorf("installed %d, put errors %d; want 0 and 1", n, fails)
	}
	r.mirror.PathDown(ev)
	if len(r.mirror.paths) != 0 {
		t.Errorf("path kept after PathDown")
	}
}

// TestOffloadSkipsCrossFamilyPaths: a dual allocation's path from an
// IPv6 client through an IPv4 relay (or the reverse) stays on the socket
// path without a Put: the programs rewrite headers in place and cannot
// change the IP version. It is neither installed nor counted as a failure.
func TestOffloadSkipsCrossFamilyPaths(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	requireOffloadRoot(t)
	r := newPathRig(t)
	ev := turn.PathEvent{
		FiveTuple: turn.FiveTuple{Client: netip.MustParseAddrPort("[::1]:5000"), Server: netip.MustParseAddrPort("[::1]:3478"), Proto: turn.ProtoUDP},
		Relay:     netip.MustParseAddrPort("127.0.0.1:6000"), Peer: netip.MustParseAddrPort("127.0.0.1:7000"),
		Channel: 0x4001, Expires: time.Now().Add(time.Minute).UnixNano(), Cluster: 1,
	}
	r.mirror.mu.Lock()
	r.mirror.listeners[ev.FiveTuple.Server] = "udp6"
	r.mirror.mu.Unlock()
	r.mirror.PathUp(ev)
	if st := r.mirror.Status(); st.Paths != 0 || st.PutErrors != 0 {
		n, fails := st.Paths, st.PutErrors
		t.Errorf("installed %d, put errors %d; want 0 and 0", n, fails)
	}
	r.mirror.PathDown(ev)
	if len(r.mirror.paths) != 0 {
		t.Errorf("path kept after PathDown")
	}
}
