package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/selfsigned"
)

// listenTLS listens on 127.0.0.1 (closed when the test ends) and returns
// the listener, a TURN-TLS-like server config whose GetConfigForClient
// gives each connection a clone logging to Secrets of its own, with
// session tickets off (see the package comment), and the channel each
// connection's Secrets arrive on.
func listenTLS(t *testing.T) (net.Listener, *tls.Config, <-chan *Secrets) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	secrets := make(chan *Secrets, 1)
	return ln, serverConfig(t, secrets), secrets
}

func serverConfig(t *testing.T, got chan<- *Secrets) *tls.Config {
	t.Helper()
	certPath, keyPath, err := selfsigned.Write(t.TempDir(), "localhost", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	base := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, SessionTicketsDisabled: true}
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		s := &Secrets{}
		c.KeyLogWriter = s
		got <- s
		return c, nil
	}}
}

// takeOver runs the server handshake on raw over a RecordConn and
// returns the connection's record layer and its cipher suite.
func takeOver(t *testing.T, raw net.Conn, conf *tls.Config, secrets <-chan *Secrets) (*Records, uint16) {
	t.Helper()
	rc := NewRecordConn(raw)
	tc := tls.Server(rc, conf)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if !rc.Finish() {
		t.Fatal("the handshake left part of a record unread in RecordConn")
	}
	client, server, ok := (<-secrets).Traffic()
	if !ok {
		t.Fatal("no traffic secrets in the key log")
	}
	st := tc.ConnectionState()
	if st.Version != tls.VersionTLS13 {
		t.Fatalf("negotiated %s, want TLS 1.3", tls.VersionName(st.Version))
	}
	r, err := New(st.CipherSuite, client, server, true)
	if err != nil {
		t.Fatal(err)
	}
	return r, st.CipherSuite
}

// readRecord reads one whole record from c.
func readRecord(t *testing.T, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec := make([]byte, Header, Header+MaxCiphertext)
	if _, err := io.ReadFull(c, rec); err != nil {
		t.Fatalf("record header: %v", err)
	}
	n, err := RecordLen(rec)
	if err != nil {
		t.Fatal(err)
	}
	rec = rec[:n]
	if _, err := io.ReadFull(c, rec[Header:]); err != nil {
		t.Fatalf("record body: %v", err)
	}
	return rec
}

// gateConn holds the server's reads after its first write (its whole
// flight, ServerHello to Finished) until its socket holds want bytes: the
// client's Finished and the application data it writes right after are
// then in the socket together when the server reads its Finished.
type gateConn struct {
	*net.TCPConn
	want  int
	wrote bool
}

// finishedRecord is the size in bytes of a TLS 1.3 client's Finished
// record under a SHA-256 suite (Go's client offers AES-128-GCM first on
// hardware with AES, ChaCha20 otherwise): a 4-byte header and 32 bytes of
// verify_data, sealed.
const finishedRecord = Overhead + 4 + 32

// dataRecord is the size in bytes of a record carrying n bytes.
func dataRecord(n int) int { return Overhead + n }

func (g *gateConn) Write(p []byte) (int, error) { g.wrote = true; return g.TCPConn.Write(p) }
func (g *gateConn) Read(p []byte) (int, error) {
	if g.wrote && g.want > 0 {
		want := g.want
		g.want = 0
		rc, err := g.SyscallConn()
		if err != nil {
			return 0, err
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			n := 0
			_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
			if n >= want {
				break
			}
		}
	}
	return g.TCPConn.Read(p)
}

// TestAgainstCryptoTLS takes a connection's records over from crypto/tls
// after its handshake and talks to a crypto/tls client over real sockets:
// the client's first data, sent behind its Finished, is in the socket and
// opens (RecordConn left it there); data sealed here reads at the client;
// a KeyUpdate each way (the server asks, the client answers, RFC 8446
// §4.6.3) moves both directions' keys; the client's close_notify opens as
// an alert; a record changed on the way fails as ErrBadRecord.
func TestAgainstCryptoTLS(t *testing.T) {
	ln, conf, secrets := listenTLS(t)
	const first = "first, behind the Finished"
	client := make(chan *tls.Conn, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := tls.Dial("tcp4", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the test's self-signed certificate
		if err != nil {
			t.Error(err)
			close(client)
			return
		}
		if _, err := c.Write([]byte(first)); err != nil {
			t.Error(err)
		}
		client <- c
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	r, _ := takeOver(t, &gateConn{TCPConn: raw.(*net.TCPConn), want: finishedRecord + dataRecord(len(first))}, conf, secrets)
	c := <-client
	if c == nil {
		t.FailNow()
	}
	defer c.Close()

	typ, p, err := r.Open(readRecord(t, raw))
	if err != nil || typ != ContentAppData || string(p) != first {
		t.Fatalf("client's first record: type %d %q %v", typ, p, err)
	}

	// Server → client, a record of more than MaxPlaintext split in two.
	big := bytes.Repeat([]byte("0123456789abcdef"), MaxPlaintext/16+10)
	out, err := r.SealData(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(out); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(big))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("client read %d bytes of %d sealed here: %v", len(got), len(big), err)
	}

	// The server asks for a key update: it sends KeyUpdate(update_requested),
	// moves its sending keys and sends data under them; the client answers
	// with its own KeyUpdate before its next data.
	out, err = r.Seal(nil, ContentHandshake, []byte{typeKeyUpdate, 0, 0, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.out.update(r.suite); err != nil {
		t.Fatal(err)
	}
	if out, err = r.SealData(out, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(out); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got[:4]); err != nil || string(got[:4]) != "ping" {
		t.Fatalf("client read %q after the server's KeyUpdate: %v", got[:4], err)
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	typ, p, err = r.Open(readRecord(t, raw))
	if err != nil || typ != ContentHandshake {
		t.Fatalf("want the client's KeyUpdate, got type %d %x %v", typ, p, err)
	}
	if respond, err := r.HandleHandshake(p); err != nil || respond {
		t.Fatalf("client's KeyUpdate: respond %v, %v; want false, nil", respond, err)
	}
	typ, p, err = r.Open(readRecord(t, raw))
	if err != nil || typ != ContentAppData || string(p) != "pong" {
		t.Fatalf("client's data after its KeyUpdate: type %d %q %v", typ, p, err)
	}

	// A record changed on the way.
	if _, err := c.Write([]byte("changed")); err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, raw)
	good := bytes.Clone(rec)
	rec[len(rec)-1] ^= 1
	saved := r.in
	if _, _, err := r.Open(rec); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("changed record: %v, want ErrBadRecord", err)
	}
	r.in = saved // the connection would end here; the test goes on with the intact copy
	if typ, p, err := r.Open(good); err != nil || typ != ContentAppData || string(p) != "changed" {
		t.Fatalf("intact record: type %d %q %v", typ, p, err)
	}

	// close_notify.
	_ = c.Close()
	typ, p, err = r.Open(readRecord(t, raw))
	if err != nil || typ != ContentAlert || len(p) != 2 || p[1] != 0 {
		t.Fatalf("want the client's close_notify, got type %d %x %v", typ, p, err)
	}
	wg.Wait()
}

// TestRecordConnWithoutIt is TestAgainstCryptoTLS's first step with the
// raw socket under the handshake instead of a RecordConn: crypto/tls then
// reads the client's first data with its Finished, and the socket holds
// nothing of it. This is what RecordConn is for.
func TestRecordConnWithoutIt(t *testing.T) {
	ln, conf, secrets := listenTLS(t)
	done, hold := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		c, err := tls.Dial("tcp4", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}) //nolint:gosec // the test's self-signed certificate
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("first"))
		<-hold
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Server(&gateConn{TCPConn: raw.(*net.TCPConn), want: finishedRecord + dataRecord(len("first"))}, conf)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	<-secrets
	_ = raw.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [64]byte
	if n, err := raw.Read(b[:]); err == nil {
		t.Errorf("the socket still held %d bytes: crypto/tls read only to the end of its Finished even without RecordConn, so this test no longer shows why RecordConn is needed", n)
	}
	close(hold)
	<-done
}

// TestSealOpenAllocatesNothing seals and opens records between a server's
// and a client's record layer of the same secrets, for each suite, with
// room enough: no heap allocation per record.
func TestSealOpenAllocatesNothing(t *testing.T) {
	for id, s := range suites {
		t.Run(tls.CipherSuiteName(id), func(t *testing.T) {
			cs := bytes.Repeat([]byte{1}, s.hash().Size())
			ss := bytes.Repeat([]byte{2}, s.hash().Size())
			srv, err := New(id, cs, ss, true)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := New(id, cs, ss, false)
			if err != nil {
				t.Fatal(err)
			}
			payload := bytes.Repeat([]byte("m"), 1200)
			buf := make([]byte, 0, SealRoom(len(payload)))
			allocs := testing.AllocsPerRun(200, func() {
				rec, err := srv.Seal(buf[:0], ContentAppData, payload)
				if err != nil {
					t.Fatal(err)
				}
				typ, p, err := cli.Open(rec)
				if err != nil || typ != ContentAppData || !bytes.Equal(p, payload) {
					t.Fatalf("opened type %d, %d bytes, %v", typ, len(p), err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v heap allocations per sealed and opened record, want 0", allocs)
			}
		})
	}
}

// testSecrets are the client's and the server's traffic secrets of the
// in-memory tests (AES-128-GCM-SHA256: 32 bytes each).
var testSecrets = [2][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}

// sealFirst returns the server's first record of type typ carrying p
// under testSecrets.
func sealFirst(tb testing.TB, typ byte, p []byte) []byte {
	tb.Helper()
	srv, err := New(tls.TLS_AES_128_GCM_SHA256, testSecrets[0], testSecrets[1], true)
	if err != nil {
		tb.Fatal(err)
	}
	rec, err := srv.Seal(nil, typ, p)
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

// TestMalformed: what Open and HandleHandshake refuse.
func TestMalformed(t *testing.T) {
	id := tls.TLS_AES_128_GCM_SHA256
	cs, ss := testSecrets[0], testSecrets[1]
	seal := func(typ byte, p []byte) []byte { return sealFirst(t, typ, p) }
	client := func() *Records {
		c, err := New(id, cs, ss, false)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		rec  []byte
	}{
		{"outer type handshake", append([]byte{ContentHandshake}, seal(ContentAppData, []byte("x"))[1:]...)},
		{"outer type change_cipher_spec", []byte{20, 3, 3, 0, 1, 1}},
		{"too short for a tag", []byte{ContentAppData, 3, 3, 0, 16}},
		{"over MaxCiphertext", append([]byte{ContentAppData, 3, 3, (MaxCiphertext + 1) >> 8, (MaxCiphertext + 1) & 0xff}, make([]byte, MaxCiphertext+1)...)},
		{"length past the record", seal(ContentAppData, []byte("x"))[:20]},
	} {
		if _, _, err := client().Open(tc.rec); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
	// All padding: a record whose inner plaintext has no content type.
	srv, _ := New(id, cs, ss, true)
	rec, err := srv.Seal(nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client().Open(rec); !errors.Is(err, ErrMalformed) {
		t.Errorf("all padding: %v, want ErrMalformed", err)
	}
	if _, err := srv.Seal(nil, ContentAppData, make([]byte, MaxPlaintext+1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("Seal of MaxPlaintext+1 bytes: %v, want ErrTooLong", err)
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"split message", []byte{typeKeyUpdate, 0, 0, 1}},
		{"request_update 2", []byte{typeKeyUpdate, 0, 0, 1, 2}},
		{"KeyUpdate not last", []byte{typeKeyUpdate, 0, 0, 1, 0, typeKeyUpdate, 0, 0, 1, 0}},
		{"NewSessionTicket", []byte{typeNewSessionTicket, 0, 0, 0}},
		{"Certificate", []byte{11, 0, 0, 0}},
	} {
		if _, err := client().HandleHandshake(tc.msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
	if _, err := New(tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, cs, ss, true); !errors.Is(err, ErrNoFastPath) {
		t.Errorf("a TLS 1.2 suite: %v, want ErrNoFastPath", err)
	}
	if _, err := New(id, cs[:31], ss, true); err == nil {
		t.Error("a secret of the wrong size was taken")
	}
}
