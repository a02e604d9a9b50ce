package turn

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

// testRelay is a relay "socket" for the sans-IO engine: the engine only
// needs its address and Close.
type testRelay struct {
	addr   netip.AddrPort
	closed bool
}

func (r *testRelay) Addr() netip.AddrPort { return r.addr }
func (r *testRelay) Close() error         { r.closed = true; return nil }
func (r *testRelay) Socket() int          { return -1 }

// testRelays hands out relay addresses 192.0.2.1:49152+ and records requests.
type testRelays struct {
	mu     sync.Mutex
	next   uint16
	reqs   []RelayRequest
	relays []*testRelay
	fail   error
	// failV6 fails only IPv6 requests (ErrAddressFamily: no IPv6 relay
	// address; ErrNoCapacity: no IPv6 port).
	failV6 error
	tokens map[uint64]uint16
}

func (t *testRelays) Allocate(_ *Allocation, req RelayRequest) (Relay, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reqs = append(t.reqs, req)
	if t.fail != nil {
		return nil, 0, t.fail
	}
	if req.IPv6 && t.failV6 != nil {
		return nil, 0, t.failV6
	}
	if t.tokens == nil {
		t.tokens = map[uint64]uint16{}
	}
	port := 49152 + t.next
	var token uint64
	switch {
	case req.Token != 0:
		p, ok := t.tokens[req.Token]
		if !ok {
			return nil, 0, ErrNoCapacity
		}
		delete(t.tokens, req.Token)
		port = p
	case req.EvenPort:
		port += port & 1
		if req.ReservePair {
			token = 0xABCDEF0000000000 | uint64(port+1)
			t.tokens[token] = port + 1
			t.next += 2
		}
	}
	t.next += 2
	ip := netip.MustParseAddr("192.0.2.1")
	if req.IPv6 {
		ip = netip.MustParseAddr("2001:db8::1")
	}
	r := &testRelay{addr: netip.AddrPortFrom(ip, port)}
	t.relays = append(t.relays, r)
	return r, token, nil
}

// testListener allows peers in 198.51.100.0/24 (cluster 1) and
// 2001:db8:1::/48 (cluster 2), and only ports 5000-5999 of 198.51.100.200
// (cluster 3).
type testListener struct{}

func (testListener) PeerCluster(p netip.AddrPort) (uint32, bool) {
	switch {
	case p.Addr() == netip.MustParseAddr("198.51.100.200"):
		return 3, p.Port() == 0 || (p.Port() >= 5000 && p.Port() <= 5999)
	case netip.MustParsePrefix("198.51.100.0/24").Contains(p.Addr()):
		return 1, true
	case netip.MustParsePrefix("2001:db8:1::/48").Contains(p.Addr()):
		return 2, true
	}
	return 0, false
}

var (
	t0          = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	testRealm   = "stunner.l7mp.io"
	clientAddr  = netip.MustParseAddrPort("203.0.113.7:50000")
	serverAddr  = netip.MustParseAddrPort("192.0.2.1:3478")
	peerAddr    = netip.MustParseAddrPort("198.51.100.10:9000")
	deniedPeer  = netip.MustParseAddrPort("127.0.0.2:9000")
	clientTuple = FiveTuple{Client: clientAddr, Server: serverAddr, Proto: ProtoUDP}
)

type fixture struct {
	t      testing.TB
	e      *Engine
	clock  *ManualClock
	relays *testRelays
}

func newFixture(t testing.TB, mutate ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: NewManualClock(t0), relays: &testRelays{}}
	cfg := Config{
		Settings: Settings{Realm: testRealm, Auth: StaticAuth{Username: "user", Password: "pass"}},
		Relays:   f.relays,
		Clock:    f.clock,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	return f
}

// client speaks TURN to the engine like a real client: it learns the nonce
// from the first 401 and signs every request after it.
type client struct {
	f          *fixture
	ft         FiveTuple
	user, pass string
	nonce      string
}

func (f *fixture) client(user, pass string) *client {
	return &client{f: f, ft: clientTuple, user: user, pass: pass}
}

func peerAttr(p netip.AddrPort) stun.Setter { return xorAttr{stun.AttrXORPeerAddress, p} }

func lifetimeSetter(s uint32) stun.Setter {
	v := make([]byte, 4)
	binary.BigEndian.PutUint32(v, s)
	return stun.RawAttribute{Type: stun.AttrLifetime, Value: v}
}

func transportUDP() stun.Setter {
	return stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{protoUDP, 0, 0, 0}}
}

func channelNumber(n uint16) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(n >> 8), byte(n), 0, 0}}
}

// raw builds a request without authentication.
func raw(t testing.TB, method stun.Method, attrs ...stun.Setter) []byte {
	t.Helper()
	s := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
	m, err := stun.Build(s...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

// signed builds an authenticated request with the client's current nonce.
func (c *client) signed(method stun.Method, attrs ...stun.Setter) []byte {
	s := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
	s = append(s, stun.NewUsername(c.user), stun.NewRealm(testRealm), stun.NewNonce(c.nonce),
		stun.NewLongTermIntegrity(c.user, testRealm, c.pass), stun.Fingerprint)
	m, err := stun.Build(s...)
	if err != nil {
		c.f.t.Fatal(err)
	}
	return m.Raw
}

// send hands pkt to the engine and decodes the reply.
func (f *fixture) send(ft FiveTuple, pkt []byte) *stun.Message {
	f.t.Helper()
	var r Result
	f.e.HandleClient(testListener{}, ft, pkt, &r)
	if r.Kind != Reply {
		f.t.Fatalf("want a reply, got kind %d drop %v", r.Kind, r.Drop)
	}
	m := &stun.Message{Raw: r.Reply}
	if err := m.Decode(); err != nil {
		f.t.Fatalf("engine sent an undecodable reply: %v", err)
	}
	return m
}

// do sends a signed request, first fetching a nonce if the client has none
// or it went stale, as RFC 8489 §9.2.3 clients do.
func (c *client) do(method stun.Method, attrs ...stun.Setter) *stun.Message {
	c.f.t.Helper()
	if c.nonce == "" {
		c.learnNonce(c.f.send(c.ft, raw(c.f.t, method, attrs...)))
	}
	m := c.f.send(c.ft, c.signed(method, attrs...))
	if code(m) == 438 {
		c.learnNonce(m)
		m = c.f.send(c.ft, c.signed(method, attrs...))
	}
	return m
}

func (c *client) learnNonce(m *stun.Message) {
	var n stun.Nonce
	if err := n.GetFrom(m); err != nil {
		c.f.t.Fatalf("no NONCE in %v", m)
	}
	c.nonce = string(n)
}

// code returns the ERROR-CODE of m, or 0 for a success response.
func code(m *stun.Message) int {
	if m.Type.Class == stun.ClassSuccessResponse {
		return 0
	}
	var ec stun.ErrorCodeAttribute
	if err := ec.GetFrom(m); err != nil {
		return -1
	}
	return int(ec.Code)
}

func xorGet(t testing.TB, m *stun.Message, at stun.AttrType) netip.AddrPort {
	t.Helper()
	v, err := m.Get(at)
	if err != nil {
		t.Fatalf("no %v in %v", at, m)
	}
	ap, ok := parseXORAddr(v, m.TransactionID[:])
	if !ok {
		t.Fatalf("bad %v", at)
	}
	return ap
}

func lifetimeOf(t testing.TB, m *stun.Message) uint32 {
	t.Helper()
	v, err := m.Get(stun.AttrLifetime)
	if err != nil || len(v) != 4 {
		t.Fatalf("no LIFETIME in %v", m)
	}
	return binary.BigEndian.Uint32(v)
}

func channelData(n uint16, payload []byte) []byte {
	b := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint16(b, n)
	binary.BigEndian.PutUint16(b[2:], uint16(len(payload)))
	copy(b[4:], payload)
	return b
}

func sendIndication(t testing.TB, peer netip.AddrPort, data []byte) []byte {
	t.Helper()
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
		peerAttr(peer), stun.RawAttribute{Type: stun.AttrData, Value: data})
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

var errBoom = errors.New("boom")
