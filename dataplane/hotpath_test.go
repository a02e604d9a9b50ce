package dataplane

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/listener/stream"
	"github.com/tern-gw/tern/dataplane/listener/stream/tlsrecord"
)

// rawClient speaks TURN over one client connection with no library on the
// relay path, so that a test can count the dataplane's heap allocations
// per relayed packet without counting a client's. Control requests use
// pion/stun codecs and happen before counting starts.
type rawClient struct {
	t      *testing.T
	conn   net.Conn
	stream bool          // TCP or TLS: messages are framed by their length fields
	r      *bufio.Reader // stream reader
	buf    []byte
	// DTLS: conn is the UDP socket, and the test seals and opens the
	// association's records itself (record.NewClient), so that pion's
	// per-record goroutines and allocations stay out of the count.
	rec   *record.Records
	wbuf  []byte
	realm string
	nonce string
	user  string
	pass  string
}

func dialRaw(t *testing.T, lc config.Listener, user, pass string) *rawClient {
	t.Helper()
	addr := addrOf(lc)
	var (
		c   net.Conn
		err error
	)
	switch lc.Protocol {
	case protocol.TURNUDP:
		c, err = net.Dial("udp4", addr)
	case protocol.TURNTCP:
		c, err = net.Dial("tcp4", addr)
	case protocol.TURNTLS:
		c, err = dialTLSRecords(addr)
	case protocol.TURNDTLS:
		return dialRawDTLS(t, addr, user, pass)
	default:
		t.Fatalf("no raw client for %s", lc.Protocol)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, conn: c, stream: lc.Protocol != protocol.TURNUDP, buf: make([]byte, 0x10000), user: user, pass: pass}
	rc.r = bufio.NewReader(c)
	return rc
}

// dialRawDTLS runs a DTLS handshake with pion/dtls over a UDP socket whose
// datagrams a pump goroutine feeds it, then stops the pump and keeps the
// socket and the association's record keys for the raw client.
func dialRawDTLS(t *testing.T, addr, user, pass string) *rawClient {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := net.DialUDP("udp4", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	hc := &handshakeConn{UDPConn: uc, in: make(chan []byte, 16), done: make(chan struct{})}
	t.Cleanup(func() { close(hc.done) })
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		for {
			b := make([]byte, 2048)
			n, err := uc.Read(b)
			if err != nil {
				return // the deadline that ends the handshake, or closed
			}
			hc.keys.Observe(b[:n])
			hc.in <- b[:n]
		}
	}()
	conf := &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret, KeyLogWriter: &hc.keys} //nolint:gosec // the test's self-signed certificate
	dc, err := dtls.Client(hc, conf)
	if err != nil {
		t.Fatal(err)
	}
	_ = dc // its goroutines wait on hc.in until the test ends
	_ = uc.SetReadDeadline(time.Now())
	<-pumped
	in, err := hc.keys.Inputs()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.NewClient(in)
	if err != nil {
		t.Fatal(err)
	}
	return &rawClient{t: t, conn: uc, buf: make([]byte, 0x10000), user: user, pass: pass, rec: rec, wbuf: make([]byte, 0, 0x10000)}
}

// handshakeConn is the net.Conn pion/dtls runs the client's handshake
// over: it writes to the UDP socket and reads what the pump gives it.
type handshakeConn struct {
	*net.UDPConn
	keys record.Keys
	in   chan []byte
	done chan struct{}
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	select {
	case b := <-h.in:
		return copy(p, b), nil
	case <-h.done:
		return 0, io.EOF
	}
}

// tlsRecordConn is a TLS 1.3 client connection whose application data
// the test seals and opens itself (tlsrecord, client side) once
// crypto/tls's handshake is done, so that crypto/tls's per-read allocation
// stays out of the count.
type tlsRecordConn struct {
	net.Conn // the TCP socket
	s        *tlsrecord.Session
}

func (c *tlsRecordConn) Read(b []byte) (int, error)  { return c.s.Read(b) }
func (c *tlsRecordConn) Write(b []byte) (int, error) { return c.s.Write(b) }

func dialTLSRecords(addr string) (net.Conn, error) {
	raw, err := net.Dial("tcp4", addr)
	if err != nil {
		return nil, err
	}
	rc := tlsrecord.NewRecordConn(raw)
	var secrets tlsrecord.Secrets
	tc := tls.Client(rc, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, KeyLogWriter: &secrets}) //nolint:gosec // the test's self-signed certificate
	if err := tc.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	client, server, ok := secrets.Traffic()
	if drained := rc.Finish(); !drained || !ok {
		raw.Close()
		return nil, fmt.Errorf("TLS client: handshake read past its last record (%v) or logged no traffic secrets (%v)", !drained, !ok)
	}
	rec, err := tlsrecord.New(tc.ConnectionState().CipherSuite, client, server, false)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return &tlsRecordConn{Conn: raw, s: tlsrecord.NewSession(raw, rec)}, nil
}

// write sends one message: on DTLS sealed into one record.
func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if c.rec != nil {
		rec, err := c.rec.Seal(c.wbuf[:0], b)
		if err != nil {
			c.t.Fatal(err)
		}
		b = rec
	}
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next message from the server.
func (c *rawClient) read() []byte {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if !c.stream {
		n, err := c.conn.Read(c.buf)
		if err != nil {
			c.t.Fatal(err)
		}
		if c.rec != nil {
			p, ok := c.rec.Open(c.buf[:n])
			if !ok {
				c.t.Fatalf("a record from the server that does not open: % x", c.buf[:min(n, 16)])
			}
			return p
		}
		return c.buf[:n]
	}
	if _, err := io.ReadFull(c.r, c.buf[:4]); err != nil {
		c.t.Fatal(err)
	}
	n := int(binary.BigEndian.Uint16(c.buf[2:4]))
	if c.buf[0]>>6 == 0 {
		n += 16 // STUN: 20-byte header in all
	} else {
		n = (n + 3) &^ 3 // ChannelData is padded to 4 bytes on streams
	}
	if _, err := io.ReadFull(c.r, c.buf[4:4+n]); err != nil {
		c.t.Fatal(err)
	}
	return c.buf[:4+n]
}

// request sends a request of method with attrs, signed once the server
// has sent a realm and nonce, answers one 401 or 438 by signing, and
// returns the success response.
func (c *rawClient) request(method stun.Method, attrs ...stun.Setter) *stun.Message {
	c.t.Helper()
	for try := 0; try < 2; try++ {
		setters := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
		if c.nonce != "" {
			setters = append(setters, stun.NewUsername(c.user), stun.NewRealm(c.realm), stun.NewNonce(c.nonce),
				stun.NewLongTermIntegrity(c.user, c.realm, c.pass))
		}
		setters = append(setters, stun.Fingerprint)
		m := stun.MustBuild(setters...)
		c.write(m.Raw)
		resp := &stun.Message{Raw: append([]byte(nil), c.read()...)}
		if err := resp.Decode(); err != nil {
			c.t.Fatal(err)
		}
		if resp.Type.Class == stun.ClassSuccessResponse {
			return resp
		}
		var code stun.ErrorCodeAttribute
		_ = code.GetFrom(resp)
		if code.Code != stun.CodeUnauthorized && code.Code != stun.CodeStaleNonce {
			c.t.Fatalf("%v: error %d %s", method, code.Code, code.Reason)
		}
		var realm stun.Realm
		var nonce stun.Nonce
		_ = realm.GetFrom(resp)
		_ = nonce.GetFrom(resp)
		c.realm, c.nonce = realm.String(), nonce.String()
	}
	c.t.Fatalf("%v: still unauthorized after signing", method)
	return nil
}

// allocate makes a UDP allocation and binds channel ch to peer; it
// returns the relayed transport address.
func (c *rawClient) allocate(ch uint16, peer netip.AddrPort) netip.AddrPort {
	c.t.Helper()
	resp := c.request(stun.MethodAllocate, stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}})
	var relayed stun.XORMappedAddress
	if err := xorRelayed(resp, &relayed); err != nil {
		c.t.Fatal(err)
	}
	peerAttr := stun.XORMappedAddress{IP: peer.Addr().AsSlice(), Port: int(peer.Port())}
	c.request(stun.MethodChannelBind,
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(ch >> 8), byte(ch), 0, 0}},
		xorPeer{peerAttr})
	ip, _ := netip.AddrFromSlice(relayed.IP)
	return netip.AddrPortFrom(ip.Unmap(), uint16(relayed.Port))
}

// xorRelayed reads XOR-RELAYED-ADDRESS, which has XOR-MAPPED-ADDRESS's encoding.
func xorRelayed(m *stun.Message, a *stun.XORMappedAddress) error {
	return a.GetFromAs(m, stun.AttrXORRelayedAddress)
}

// xorPeer is XOR-PEER-ADDRESS, which has XOR-MAPPED-ADDRESS's encoding.
type xorPeer struct{ stun.XORMappedAddress }

func (p xorPeer) AddTo(m *stun.Message) error { return p.AddToAs(m, stun.AttrXORPeerAddress) }

// channelData frames payload for channel ch, padded to 4 bytes on streams.
func channelData(ch uint16, payload []byte, stream bool) []byte {
	n := 4 + len(payload)
	if stream {
		n = (n + 3) &^ 3
	}
	b := make([]byte, n)
	binary.BigEndian.PutUint16(b[0:2], ch)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(payload)))
	copy(b[4:], payload)
	return b
}

// TestRelayAllocatesNothing relays ChannelData client -> peer and peer ->
// client through a running dataplane over UDP, TCP, TLS and DTLS, and
// counts the heap allocations of the whole process per relayed message in
// each direction apart: the listener worker, the engine, the relay worker,
// for TCP the event loop that reads the connection (on Linux; elsewhere its
// reader goroutine) and, apart, a TCP connection's reader goroutine
// (stream.SetEventLoops(false)), for TLS the connection's reader, for both the relay
// worker's queue and write, for DTLS the listener's reader and record layer and the relay
// worker's outbox. The test's own side allocates nothing (its DTLS client
// seals and opens records itself, record.NewClient; its TLS client those
// of its TLS 1.3 session, tlsrecord). Under -race (raceEnabled) only the
// TLS count is left out: sync.Pool drops pooled values at random there,
// and TLS's read buffers are pooled; the others allocate nothing there
// too.
func TestRelayAllocatesNothing(t *testing.T) {
	budget := map[protocol.Protocol]float64{protocol.TURNUDP: 0, protocol.TURNTCP: 0, protocol.TURNTLS: 0, protocol.TURNDTLS: 0}
	certPath, keyPath := writeTestCert(t, t.TempDir(), "localhost")
	cfg := testConfig(t, 29800, 29829)
	cfg.Listeners = append(cfg.Listeners,
		config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}},
		config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}, Cert: certPath, Key: keyPath},
		config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"), Routes: []string{"local"}, Cert: certPath, Key: keyPath},
	)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	startWith(t, cfg)
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peerAddr := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	type run struct {
		name string
		lc   config.Listener
		// goroutines gives the TCP connection a reader goroutine instead
		// of an event loop (stream.SetEventLoops(false)).
		goroutines bool
	}
	var runs []run
	for _, lc := range cfg.Listeners {
		runs = append(runs, run{name: string(lc.Protocol), lc: lc})
		if lc.Protocol == protocol.TURNTCP {
			// Then one accepted while the listener waited in Accept, with
			// the loops off, and moved to a loop (stream's adopt).
			runs = append(runs, run{name: "TURN-TCP reader goroutine", lc: lc, goroutines: true},
				run{name: "TURN-TCP moved to an event loop", lc: lc})
		}
	}
	for _, r := range runs {
		lc := r.lc
		t.Run(r.name, func(t *testing.T) {
			if r.goroutines {
				stream.SetEventLoops(false)
				t.Cleanup(func() { stream.SetEventLoops(true) })
			}
			c := dialRaw(t, lc, "user", "pass")
			const ch = 0x4001
			relayed := c.allocate(ch, peerAddr)
			stream.SetEventLoops(true) // answered: the server accepted c
			up := channelData(ch, []byte("client to peer, 32 bytes of it.."), c.stream)
			down := []byte("peer to client, 32 bytes of it..")
			pbuf := make([]byte, 2048)
			toPeer := func() {
				c.write(up)
				_ = peer.SetReadDeadline(time.Now().Add(3 * time.Second))
				n, from, err := peer.ReadFromUDPAddrPort(pbuf)
				if err != nil || n != 32 || from != relayed {
					t.Fatalf("peer got %d bytes from %v (relay %v): %v", n, from, relayed, err)
				}
			}
			toClient := func() {
				if _, err := peer.WriteToUDPAddrPort(down, relayed); err != nil {
					t.Fatal(err)
				}
				if m := c.read(); binary.BigEndian.Uint16(m) != ch || binary.BigEndian.Uint16(m[2:]) != uint16(len(down)) {
					t.Fatalf("client got % x, want ChannelData on %#x", m[:4], ch)
				}
			}
			for range 50 { // warm pools, buffers and the TLS record layer
				toPeer()
				toClient()
			}
			if raceEnabled && lc.Protocol == protocol.TURNTLS {
				for range 500 { // still relayed both ways, only not counted
					toPeer()
					toClient()
				}
				t.Skip("race build: sync.Pool drops pooled values at random, so TLS read buffers are allocated again; TLS's budget is checked without -race")
			}
			for _, dir := range []struct {
				name string
				f    func()
			}{{"client to peer", toPeer}, {"peer to client", toClient}} {
				allocs := testing.AllocsPerRun(500, dir.f)
				t.Logf("%s: %v heap allocations per relayed message", dir.name, allocs)
				if allocs > budget[lc.Protocol] {
					t.Errorf("%s, %s: %v heap allocations per relayed message, want at most %v", lc.Protocol, dir.name, allocs, budget[lc.Protocol])
				}
			}
		})
	}
}
