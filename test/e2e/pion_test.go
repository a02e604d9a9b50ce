package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/internal/testenv"
)

// pionClient is a pion/turn client on its own loopback socket, with the
// credentials it was made with (for hand-built requests) and its log.
type pionClient struct {
	*turn.Client
	conn       net.PacketConn
	server     *net.UDPAddr
	user, pass string
	log        *testenv.LockedBuffer
}

func newPionClient(t *testing.T, s *server, user, pass string) *pionClient {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newPionClientOn(t, conn, s.addr, user, pass)
}

// newPionClientOn is newPionClient over conn (a DTLS session: dtlsConn) to
// the listener at server.
func newPionClientOn(t *testing.T, conn net.PacketConn, server *net.UDPAddr, user, pass string) *pionClient {
	t.Helper()
	var err error
	c := &pionClient{conn: conn, server: server, user: user, pass: pass, log: &testenv.LockedBuffer{}}
	c.Client, err = turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server.String(),
		TURNServerAddr: server.String(),
		Username:       user,
		Password:       pass,
		Realm:          testRealm, // pion replaces it with the REALM of the server's 401
		Conn:           conn,
		// pion reports failed refreshes, permission refreshes and channel
		// binds only as log warnings, so the log is part of what we check.
		LoggerFactory: &logging.DefaultLoggerFactory{Writer: c.log, DefaultLogLevel: logging.LogLevelDebug},
	})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		conn.Close()
		if t.Failed() {
			t.Logf("pion client %v log:\n%s", conn.LocalAddr(), c.log.String())
		}
	})
	return c
}

// allocate makes a UDP allocation that is released (Refresh with
// LIFETIME 0) when the test ends.
func (c *pionClient) allocate(t *testing.T) net.PacketConn {
	t.Helper()
	relayConn, err := c.Allocate()
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	t.Cleanup(func() { _ = relayConn.Close() })
	return relayConn
}

// assertQuiet fails the test if pion logged a warning or an error: that is
// how it reports a failed Refresh, permission refresh or ChannelBind.
func (c *pionClient) assertQuiet(t *testing.T) {
	t.Helper()
	for _, line := range strings.Split(c.log.String(), "\n") {
		if strings.Contains(line, " WARNING: ") || strings.Contains(line, " ERROR: ") {
			t.Errorf("pion client logged: %s", line)
		}
	}
}

// transact sends a request built from attrs over the client's own socket
// (so on the 5-tuple of its allocation), answering 401 and 438 with the
// server's NONCE and REALM, and returns the final response. pion has no
// public Refresh, so the tests build Refresh (and a bare Allocate) by hand.
func (c *pionClient) transact(t *testing.T, method stun.Method, attrs ...stun.Setter) *stun.Message {
	t.Helper()
	var (
		nonce stun.Nonce
		realm stun.Realm
	)
	for range 4 {
		setters := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
		if nonce != nil {
			setters = append(setters, stun.NewUsername(c.user), realm, nonce,
				stun.NewLongTermIntegrity(c.user, realm.String(), c.pass))
		}
		setters = append(setters, stun.Fingerprint)
		msg, err := stun.Build(setters...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.PerformTransaction(msg, c.server, false)
		if err != nil {
			t.Fatalf("%v request: %v", method, err)
		}
		m := res.Msg
		var code stun.ErrorCodeAttribute
		if m.Type.Class == stun.ClassErrorResponse && code.GetFrom(m) == nil &&
			(code.Code == stun.CodeUnauthorized && nonce == nil || code.Code == stun.CodeStaleNonce) {
			if err := nonce.GetFrom(m); err != nil {
				t.Fatalf("%v: %v without NONCE: %v", method, code, err)
			}
			if err := realm.GetFrom(m); err != nil && realm == nil {
				t.Fatalf("%v: %v without REALM: %v", method, code, err)
			}
			continue
		}
		return m
	}
	t.Fatalf("%v: still asked for a nonce after 4 tries", method)
	return nil
}

// waitGone waits (bounded) until the allocation of the client's 5-tuple is
// gone and then checks that Refresh gets 437 Allocation Mismatch. It probes
// with CreatePermission because that, unlike Refresh, cannot revive an
// allocation that a server deletes lazily (coturn deletes a LIFETIME 0
// allocation from a timer, and answers CreatePermission without an
// allocation with 400 where RFC 8656 says 437; Refresh gets 437).
func (c *pionClient) waitGone(t *testing.T, probe *net.UDPAddr, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if m := c.transact(t, stun.MethodCreatePermission, peerAddress(probe)); m.Type.Class != stun.ClassErrorResponse {
			return fmt.Errorf("allocation of %v still there: CreatePermission: %v", c.conn.LocalAddr(), m)
		}
		return nil
	})
	if m := c.transact(t, stun.MethodRefresh, lifetimeAttr(600)); errorCode(m) != int(stun.CodeAllocMismatch) {
		t.Fatalf("Refresh without an allocation: %v (error %d), want 437", m, errorCode(m))
	}
}

// barrier returns once the server has handled everything the client sent before: it sends a
// STUN Binding on the same socket and waits for the answer. The server reads one 5-tuple's
// packets in order, so by then whatever it relayed for the earlier ones is in the peer's socket.
func (c *pionClient) barrier(t *testing.T) {
	t.Helper()
	if _, err := c.SendBindingRequest(); err != nil {
		t.Fatalf("STUN Binding as a barrier: %v", err)
	}
}

// sendRaw sends bytes to the server from the client's socket, bypassing
// pion's permission and channel logic.
func (c *pionClient) sendRaw(t *testing.T, b []byte) {
	t.Helper()
	if _, err := c.WriteTo(b, c.server); err != nil {
		t.Fatal(err)
	}
}

// sendIndication is a Send indication carrying data to peer.
func sendIndication(t *testing.T, peer *net.UDPAddr, data []byte) []byte {
	t.Helper()
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
		peerAddress(peer), stun.RawAttribute{Type: stun.AttrData, Value: data}, stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

// channelData frames data as ChannelData on channel ch (RFC 8656 §12.4).
func channelData(ch uint16, data []byte) []byte {
	b := make([]byte, 4+(len(data)+3)&^3)
	binary.BigEndian.PutUint16(b[0:], ch)
	binary.BigEndian.PutUint16(b[2:], uint16(len(data)))
	copy(b[4:], data)
	return b
}

type setterFunc func(*stun.Message) error

func (f setterFunc) AddTo(m *stun.Message) error { return f(m) }

func peerAddress(a *net.UDPAddr) stun.Setter {
	return setterFunc(func(m *stun.Message) error {
		return stun.XORMappedAddress{IP: a.IP, Port: a.Port}.AddToAs(m, stun.AttrXORPeerAddress)
	})
}

func lifetimeAttr(seconds uint32) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrLifetime, Value: binary.BigEndian.AppendUint32(nil, seconds)}
}

var requestedTransportUDP = stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}}

// responseLifetime is the LIFETIME of a success response, in seconds.
func responseLifetime(t *testing.T, m *stun.Message) uint32 {
	t.Helper()
	v, err := m.Get(stun.AttrLifetime)
	if err != nil || len(v) != 4 {
		t.Fatalf("%v: no valid LIFETIME: %v", m, err)
	}
	return binary.BigEndian.Uint32(v)
}

// errorCode is the ERROR-CODE of an error response, 0 for any other message.
func errorCode(m *stun.Message) int {
	var code stun.ErrorCodeAttribute
	if m.Type.Class != stun.ClassErrorResponse || code.GetFrom(m) != nil {
		return 0
	}
	return int(code.Code)
}

// wantTURNError checks that err is an error response with one of codes.
func wantTURNError(t *testing.T, err error, codes ...int) {
	t.Helper()
	var te *stun.TurnError
	if !errors.As(err, &te) {
		t.Fatalf("got error %v, want a TURN error response %v", err, codes)
	}
	for _, c := range codes {
		if int(te.ErrorCodeAttr.Code) == c && strings.Contains(err.Error(), strconv.Itoa(c)) {
			return
		}
	}
	t.Fatalf("got %v, want error code %v", err, codes)
}

// checkRelayAddr checks that a relayed address is the configured relay
// address with a port from the configured range.
func (s *server) checkRelayAddr(t *testing.T, a net.Addr) {
	t.Helper()
	ua, ok := a.(*net.UDPAddr)
	if !ok || !ua.IP.Equal(net.ParseIP(s.cfg.Relay.Address)) ||
		ua.Port < s.cfg.Relay.MinPort || ua.Port > s.cfg.Relay.MaxPort {
		t.Fatalf("relayed address %v, want %s:[%d-%d]", a, s.cfg.Relay.Address, s.cfg.Relay.MinPort, s.cfg.Relay.MaxPort)
	}
}

// roundTrips sends n distinct payloads through the allocation to an echo
// peer, one at a time, and checks that each comes back intact from that
// peer. Lock-step keeps the test about correctness, not about loss under
// load; pion switches from Send indications to a channel along the way.
func roundTrips(t *testing.T, relayConn net.PacketConn, peer *net.UDPAddr, n int) {
	t.Helper()
	buf := make([]byte, 1500)
	for i := range n {
		payload := make([]byte, 100)
		_, _ = rand.Read(payload)
		copy(payload, fmt.Sprintf("tern-e2e %d ", i))
		if _, err := relayConn.WriteTo(payload, peer); err != nil {
			t.Fatalf("packet %d: WriteTo %v: %v", i, peer, err)
		}
		_ = relayConn.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, from, err := relayConn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("packet %d: no echo from %v: %v", i, peer, err)
		}
		if from.String() != peer.String() || !bytes.Equal(buf[:got], payload) {
			t.Fatalf("packet %d: got %d bytes from %v, want the %d bytes sent to %v", i, got, from, len(payload), peer)
		}
	}
}

// TestPionRelay allocates with the pion client and relays 50 packets to an
// echo peer and back (both directions, Send/Data indications then a
// channel), checking payloads, the relayed address and the source the
// peer sees.
func TestPionRelay(t *testing.T) {
	s := startTernd(t, nil)
	echo := startEchoPeer(t, "127.0.0.1:0")
	c := newPionClient(t, s, testUser, testPassword)

	mapped, err := c.SendBindingRequest()
	if err != nil {
		t.Fatalf("STUN Binding: %v", err)
	}
	if mapped.String() != c.conn.LocalAddr().String() {
		t.Errorf("XOR-MAPPED-ADDRESS %v, want the client's %v", mapped, c.conn.LocalAddr())
	}

	relayConn := c.allocate(t)
	s.checkRelayAddr(t, relayConn.LocalAddr())

	const n = 50
	roundTrips(t, relayConn, echo.addr, n)
	got, sources := echo.received()
	if got != n || sources[relayConn.LocalAddr().String()] != n {
		t.Errorf("peer got %d packets from %v, want %d, all from the relayed address %v", got, sources, n, relayConn.LocalAddr())
	}
	c.assertQuiet(t)
}

// TestPionRefreshAndDeallocate checks Refresh three ways on a server whose
// maxLifetime is 4 s: an explicit Refresh is granted a clamped LIFETIME;
// pion's own refreshes (every lifetime/2) keep an allocation alive for 2.5
// lifetimes while one refreshed only once expires (437 afterwards);
// and Refresh with LIFETIME 0 (what relayConn.Close sends) deletes the
// allocation, which stunner_allocations_active shows.
func TestPionRefreshAndDeallocate(t *testing.T) {
	const maxLifetime = 4
	s := startTernd(t, func(c *config) { c.Limits.MaxLifetime = maxLifetime })
	echo := startEchoPeer(t, "127.0.0.1:0")
	c := newPionClient(t, s, testUser, testPassword)
	relayConn := c.allocate(t)

	// An allocation made by hand, so that nothing refreshes it.
	idle := newPionClient(t, s, testUser, testPassword)
	if m := idle.transact(t, stun.MethodAllocate, requestedTransportUDP); m.Type != stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse) {
		t.Fatalf("hand-made Allocate: %v (error %d)", m, errorCode(m))
	}
	if s.metricsURL != "" {
		s.waitMetric(t, "stunner_allocations_active", 2, 5*time.Second)
	}

	// An explicit Refresh, on the hand-made allocation: a server may hand
	// out a new NONCE on the 401 that starts it and then answer requests
	// with the old one by 438 (coturn does); pion would then fail to
	// deallocate, as Close ignores the answer.
	m := idle.transact(t, stun.MethodRefresh, lifetimeAttr(3600))
	if m.Type != stun.NewType(stun.MethodRefresh, stun.ClassSuccessResponse) {
		t.Fatalf("Refresh: %v (error %d), want success", m, errorCode(m))
	}
	if lt := responseLifetime(t, m); lt == 0 || lt > maxLifetime {
		t.Errorf("Refresh granted LIFETIME %d s, want 1-%d (maxLifetime)", lt, maxLifetime)
	}

	// Traffic for 2.5 lifetimes: it only keeps flowing if pion's refreshes work. Time passing is
	// what this tests (the idle allocation must expire meanwhile), so the loop paces itself
	// with a sleep rather than waiting for an event.
	deadline := time.Now().Add(maxLifetime * 5 / 2 * time.Second)
	trips := 0
	for time.Now().Before(deadline) {
		roundTrips(t, relayConn, echo.addr, 1)
		trips++
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%d round trips over %d s", trips, maxLifetime*5/2)
	c.assertQuiet(t)

	idle.waitGone(t, echo.addr, time.Second) // should be gone already
	if s.metricsURL != "" {
		s.waitMetric(t, "stunner_allocations_active", 1, 5*time.Second)
	}

	// Close sends Refresh LIFETIME 0 without waiting for the answer.
	if err := relayConn.Close(); err != nil {
		t.Fatalf("closing the allocation: %v", err)
	}
	if s.metricsURL != "" {
		s.waitMetric(t, "stunner_allocations_active", 0, 5*time.Second)
	}
	c.waitGone(t, echo.addr, 5*time.Second)
}

// TestPionWrongCredentials: Allocate with bad credentials is refused with
// 401 (or 441), and data the refused client then sends anyway (a Send
// indication and ChannelData) never reaches the peer.
func TestPionWrongCredentials(t *testing.T) {
	s := startTernd(t, nil)
	echo := startEchoPeer(t, "127.0.0.1:0")
	for _, tc := range []struct{ name, user, pass string }{
		{"wrong password", testUser, "wrong"},
		{"unknown user", "nobody", testPassword},
		{"empty password", testUser, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPionClient(t, s, tc.user, tc.pass)
			_, err := c.Allocate()
			wantTURNError(t, err, int(stun.CodeUnauthorized), int(stun.CodeWrongCredentials))
			c.sendRaw(t, sendIndication(t, echo.addr, []byte("refused client, send indication")))
			c.sendRaw(t, channelData(0x4000, []byte("refused client, channel data")))
			c.barrier(t)
		})
	}
	echo.flush(t)
	if got, src := echo.received(); got != 0 {
		t.Errorf("peer got %d packets from %v, want none", got, src)
	}
}

// TestPionPeerOutsideAllowlist: the only cluster is 127.0.0.1/32, so
// CreatePermission for 127.0.0.2 is refused with 403 and nothing crosses
// the relay between the client and 127.0.0.2, in either direction, while
// the same allocation reaches 127.0.0.1.
func TestPionPeerOutsideAllowlist(t *testing.T) {
	s := startTernd(t, nil)
	allowed := startEchoPeer(t, "127.0.0.1:0")
	denied := startEchoPeer(t, "127.0.0.2:0")
	c := newPionClient(t, s, testUser, testPassword)
	relayConn := c.allocate(t)

	roundTrips(t, relayConn, allowed.addr, 3) // the allocation itself works

	wantTURNError(t, c.CreatePermission(denied.addr), int(stun.CodeForbidden))
	// pion's WriteTo asks for the permission first and returns its error.
	_, err := relayConn.WriteTo([]byte("to a denied peer"), denied.addr)
	wantTURNError(t, err, int(stun.CodeForbidden))
	// A Send indication without a permission, sent by hand.
	c.sendRaw(t, sendIndication(t, denied.addr, []byte("send indication to a denied peer")))
	// The denied peer writes to the relayed address: no permission, so the
	// client must not see it.
	ra := relayConn.LocalAddr().(*net.UDPAddr)
	for range 3 {
		if _, err := denied.conn.WriteToUDP([]byte("from a denied peer"), ra); err != nil {
			t.Fatal(err)
		}
	}
	// The allowed peer's echo reaches the relayed address after the denied peer's datagrams,
	// and the client reads its relay in order: roundTrips fails if anything from the denied
	// peer comes first.
	roundTrips(t, relayConn, allowed.addr, 1)
	c.barrier(t) // the server has handled the hand-made Send indication
	denied.flush(t)
	if got, src := denied.received(); got != 0 {
		t.Errorf("denied peer got %d packets from %v, want none", got, src)
	}
}

// restCredential is a TURN REST API credential: username
// "<expiry>:<user>", password base64(HMAC-SHA1(secret, username)).
func restCredential(secret string, expiry time.Time, user string) (string, string) {
	username := strconv.FormatInt(expiry.Unix(), 10) + ":" + user
	return username, restPassword(secret, username)
}

func restPassword(secret, username string) string {
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestPionEphemeralAuth runs a server with a shared secret: a valid REST
// credential allocates and relays, an expired or forged one is refused.
func TestPionEphemeralAuth(t *testing.T) {
	const secret = "e2e-shared-secret"
	s := startTernd(t, func(c *config) {
		c.Auth = auth{Type: "ephemeral", Realm: testRealm, SharedSecret: secret}
	})
	echo := startEchoPeer(t, "127.0.0.1:0")
	now := time.Now()
	valid, validPass := restCredential(secret, now.Add(time.Hour), "alice")
	expired, expiredPass := restCredential(secret, now.Add(-time.Hour), "alice")
	_, forgedPass := restCredential("not-the-secret", now.Add(time.Hour), "alice")
	for _, tc := range []struct {
		name, user, pass string
		ok               bool
	}{
		{"valid", valid, validPass, true},
		{"expired", expired, expiredPass, false},
		{"wrong secret", valid, forgedPass, false},
		{"no expiry", "alice", restPassword(secret, "alice"), false},
		{"static credentials", testUser, testPassword, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPionClient(t, s, tc.user, tc.pass)
			if !tc.ok {
				_, err := c.Allocate()
				wantTURNError(t, err, int(stun.CodeUnauthorized), int(stun.CodeWrongCredentials))
				return
			}
			relayConn := c.allocate(t)
			s.checkRelayAddr(t, relayConn.LocalAddr())
			roundTrips(t, relayConn, echo.addr, 5)
			c.assertQuiet(t)
		})
	}
}
