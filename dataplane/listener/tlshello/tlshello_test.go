package tlshello

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"testing/iotest"
)

// helloBytes returns the ClientHello crypto/tls sends with conf: its
// first flight, every byte up to the point it waits for the server.
func helloBytes(t testing.TB, conf *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		_ = tls.Client(c, conf).Handshake()
	}()
	defer c.Close()
	defer s.Close()
	// crypto/tls writes the ClientHello in one Write; read it whole.
	buf := make([]byte, MaxSize)
	var got []byte
	for {
		n, err := s.Read(buf)
		got = append(got, buf[:n]...)
		if _, complete, perr := Parse(got); complete || perr != nil || err != nil {
			if perr != nil || err != nil {
				t.Fatalf("reading crypto/tls's ClientHello: %v %v", perr, err)
			}
			return got
		}
	}
}

// refragment splits the handshake bytes of a one-record ClientHello into
// records of at most size bytes (RFC 8446 §5.1 allows that).
func refragment(hello []byte, size int) []byte {
	msg := hello[5:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func TestParseClientHello(t *testing.T) {
	turnALPN := helloBytes(t, &tls.Config{ServerName: "turn.example.com", NextProtos: []string{"stun.turn"}})
	h2 := helloBytes(t, &tls.Config{ServerName: "www.example.com", NextProtos: []string{"h2", "http/1.1"}})
	bare := helloBytes(t, &tls.Config{InsecureSkipVerify: true}) // an IP address: no SNI, no ALPN
	names := []string{"TURN.example.com."}
	noExtensions := []byte{22, 3, 1, 0, 45, 1, 0, 0, 41, 3, 3}
	noExtensions = append(noExtensions, make([]byte, 32)...)    // random
	noExtensions = append(noExtensions, 0, 0, 2, 0, 0x2f, 1, 0) // no session ID, one suite, null compression
	for _, tc := range []struct {
		name     string
		raw      []byte
		wantSNI  string
		wantALPN []string
		wantTURN bool
	}{
		{"alpn stun.turn", turnALPN, "turn.example.com", []string{"stun.turn"}, true},
		{"https", h2, "www.example.com", []string{"h2", "http/1.1"}, false},
		{"no sni no alpn", bare, "", nil, true},
		{"sni is a turn name", helloBytes(t, &tls.Config{ServerName: "turn.example.com"}), "turn.example.com", nil, true},
		{"sni not a turn name", helloBytes(t, &tls.Config{ServerName: "www.example.com"}), "www.example.com", nil, false},
		{"alpn other, no sni", helloBytes(t, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}), "", []string{"h2"}, false},
		{"split in records of 7 bytes", refragment(h2, 7), "www.example.com", []string{"h2", "http/1.1"}, false},
		{"split in records of 1 byte", refragment(turnALPN, 1), "turn.example.com", []string{"stun.turn"}, true},
		{"early data after the hello", append(slices.Clone(h2), 23, 3, 3, 0, 5, 1, 2, 3, 4, 5), "www.example.com", []string{"h2", "http/1.1"}, false},
		{"no extensions", noExtensions, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, complete, err := Parse(tc.raw)
			if err != nil || !complete {
				t.Fatalf("Parse: complete %v, error %v", complete, err)
			}
			if h.ServerName != tc.wantSNI || !slices.Equal(h.ALPN, tc.wantALPN) {
				t.Errorf("got SNI %q ALPN %q, want %q %q", h.ServerName, h.ALPN, tc.wantSNI, tc.wantALPN)
			}
			if got := h.IsTURN(names); got != tc.wantTURN {
				t.Errorf("IsTURN = %v, want %v", got, tc.wantTURN)
			}
			// Every prefix of the hello is incomplete, never an error.
			whole := 5 + 4 + int(tc.raw[6])<<16 | int(tc.raw[7])<<8 | int(tc.raw[8])
			for i := range min(len(tc.raw), whole) {
				if _, complete, err := Parse(tc.raw[:i]); complete || err != nil {
					t.Fatalf("prefix of %d bytes: complete %v, error %v", i, complete, err)
				}
			}
			// Read one byte at a time, with what follows the hello left unread.
			r := iotest.OneByteReader(bytes.NewReader(append(slices.Clip(tc.raw), "GET /"...)))
			h2, raw, err := Read(r)
			if err != nil || !bytes.HasPrefix(tc.raw, raw) || h2.ServerName != tc.wantSNI {
				t.Fatalf("Read: %q, %d bytes read (want %d), %v", h2.ServerName, len(raw), len(tc.raw), err)
			}
		})
	}
}

func TestParseClientHelloErrors(t *testing.T) {
	h2 := helloBytes(t, &tls.Config{ServerName: "www.example.com", NextProtos: []string{"h2"}})
	bad := slices.Clone(h2)
	sid := int(bad[5+4+2+32])
	bad[5+4+2+32+1+sid], bad[5+4+2+32+2+sid] = 0xff, 0xff // cipher suites past the message
	huge := []byte{22, 3, 1, 0x40, 0, 1, 0x01, 0, 0}
	for _, tc := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"http request", []byte("GET / HTTP/1.1\r\n"), ErrNotHandshake},
		{"stun binding over tcp", []byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42}, ErrNotHandshake},
		{"ssl 2 version", []byte{22, 2, 0, 0, 1}, ErrNotHandshake},
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, ErrNotHandshake},
		{"empty record", []byte{22, 3, 1, 0, 0}, ErrBadHello},
		{"record over 2^14", []byte{22, 3, 1, 0x40, 1}, ErrBadHello},
		{"alert after a fragment", append(refragment(h2, 10)[:15], 21, 3, 3, 0, 2, 2, 40), ErrNotHandshake},
		{"bad session id", bad, ErrBadHello},
		{"hello over the cap", huge, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Parse(tc.raw); !errors.Is(err, tc.want) {
				t.Errorf("Parse: %v, want %v", err, tc.want)
			}
		})
	}
	// A hello that claims 16 KiB and sends it in records: cut at the cap.
	var big []byte
	for len(big) < MaxSize+100 {
		big = append(big, 22, 3, 1, 0x10, 0)
		big = append(big, make([]byte, 0x1000)...)
	}
	big[5], big[6], big[7], big[8] = 1, 0, 0x3f, 0xf0 // 16368 bytes of hello
	if _, raw, err := Read(bytes.NewReader(big)); !errors.Is(err, ErrTooLarge) || len(raw) > MaxSize {
		t.Errorf("Read of an endless hello: %d bytes, %v", len(raw), err)
	}
	// Cut short by EOF.
	if _, _, err := Read(bytes.NewReader(h2[:40])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Read of a truncated hello: %v", err)
	}
}

// FuzzParseClientHello feeds arbitrary first bytes of a connection, in
// reads of arbitrary sizes: parsing must never panic, read past the cap or
// claim a hello from fewer bytes than a whole one needs.
func FuzzParseClientHello(f *testing.F) {
	f.Add(helloBytes(f, &tls.Config{ServerName: "turn.example.com", NextProtos: []string{"stun.turn"}}))
	f.Add(refragment(helloBytes(f, &tls.Config{ServerName: "www.example.com", NextProtos: []string{"h2"}}), 50))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, complete, err := Parse(raw)
		if complete && (err != nil || len(raw) < 5+4+2+32+1+2+1) {
			t.Fatalf("complete from %d bytes, error %v", len(raw), err)
		}
		if !complete && (h.ServerName != "" || h.ALPN != nil) {
			t.Fatalf("an incomplete hello returned %+v", h)
		}
		chunk := 1
		if len(raw) > 0 {
			chunk = int(raw[0]%16) + 1
		}
		_, got, _ := Read(&chunkConn{r: bytes.NewReader(raw), chunk: chunk})
		if len(got) > MaxSize || len(got) > len(raw) {
			t.Fatalf("read %d bytes of %d", len(got), len(raw))
		}
	})
}

// chunkConn reads from r at most chunk bytes at a time, as a TCP
// connection may deliver a ClientHello.
type chunkConn struct {
	r     *bytes.Reader
	chunk int
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if len(b) > c.chunk {
		b = b[:c.chunk]
	}
	return c.r.Read(b)
}
