package hello

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestParseClientHello(t *testing.T) {
	ok := Default()
	ok.RecordSeq, ok.MessageSeq, ok.Session, ok.Cookie = 5, 1, []byte{1, 2, 3}, bytes.Repeat([]byte{9}, 20)
	good := AppendClientHello(nil, ok)
	ch, err := ParseClientHello(good)
	if err != nil {
		t.Fatalf("ParseClientHello(a valid ClientHello) = %v", err)
	}
	if ch.RecordSeq != 5 || ch.MessageSeq != 1 || ch.Version != versionDTLS12 || !bytes.Equal(ch.Random, bytes.Repeat([]byte{7}, 32)) ||
		!bytes.Equal(ch.Session, []byte{1, 2, 3}) || !bytes.Equal(ch.Cookie, ok.Cookie) ||
		!bytes.Equal(ch.Suites, []byte{0xc0, 0x2b, 0xc0, 0x2f}) || !bytes.Equal(ch.Comp, []byte{0}) {
		t.Fatalf("ParseClientHello read %+v", ch)
	}

	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	bad := []struct {
		name string
		d    []byte
	}{
		{"empty", nil},
		{"garbage of 14 bytes starting 22", append([]byte{22}, bytes.Repeat([]byte{0xaa}, 13)...)},
		{"application data", mutate(func(b []byte) []byte { b[0] = 23; return b })},
		{"record version TLS 1.2", mutate(func(b []byte) []byte { b[1], b[2] = 3, 3; return b })},
		{"epoch 1", mutate(func(b []byte) []byte { b[4] = 1; return b })},
		{"record longer than the datagram", good[:len(good)-1]},
		{"ServerHello", mutate(func(b []byte) []byte { b[13] = 2; return b })},
		{"fragmented", mutate(func(b []byte) []byte { b[13+11]--; return b })},
		{"fragment offset", mutate(func(b []byte) []byte { b[13+8] = 1; return b })},
		{"message longer than the record", mutate(func(b []byte) []byte { b[13+3]++; b[13+11]++; return b })},
		{"session id of 33 bytes", AppendClientHello(nil, Spec{RecordVersion: versionDTLS12, Session: make([]byte, 33), Suites: []uint16{1}})},
		{"no cipher suite", AppendClientHello(nil, Spec{RecordVersion: versionDTLS12})},
		{"odd cipher suites length", mutate(func(b []byte) []byte {
			i := 13 + 12 + 2 + 32 + 1 + 3 + 1 + 20
			b[i+1] = 3
			return b
		})},
		{"extensions shorter than their length", mutate(func(b []byte) []byte { b[len(b)-5]++; return b })},
		{"a byte after the compression methods", mutate(func(b []byte) []byte {
			i := 13 + 12 + 2 + 32 + 1 + 3 + 1 + 20 + 2 + 4 + 2
			return append(b[:i], 7)
		})},
		{"no compression method", mutate(func(b []byte) []byte {
			i := 13 + 12 + 2 + 32 + 1 + 3 + 1 + 20 + 2 + 4
			b[i] = 0
			return b
		})},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseClientHello(tc.d); err != ErrNotClientHello {
				t.Fatalf("ParseClientHello = %v, want ErrNotClientHello", err)
			}
		})
	}
}

// appendHelloVerifyRequest encodes a HelloVerifyRequest as pion/dtls
// sends it (RFC 6347 §4.2.1, §4.3.2).
func appendHelloVerifyRequest(dst []byte, recordSeq uint64, cookie []byte) []byte {
	body := 2 + 1 + len(cookie)
	dst = append(dst, 22, versionDTLS12[0], versionDTLS12[1])
	dst = binary.BigEndian.AppendUint64(dst, recordSeq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(handshakeHeaderLen+body))
	dst = append(dst, handshakeHelloVerifyRequest, 0, 0, byte(body), 0, 0, 0, 0, 0, 0, 0, byte(body))
	dst = append(dst, versionDTLS12[0], versionDTLS12[1], byte(len(cookie)))
	return append(dst, cookie...)
}

func TestParseHelloVerifyRequest(t *testing.T) {
	cookie := bytes.Repeat([]byte{0xc0}, 20)
	good := appendHelloVerifyRequest(nil, 3, cookie)
	if c, ok := ParseHelloVerifyRequest(good); !ok || !bytes.Equal(c, cookie) {
		t.Fatalf("ParseHelloVerifyRequest = % x, %v", c, ok)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		d    []byte
	}{
		{"empty", nil},
		{"ClientHello", AppendClientHello(nil, Default())},
		{"epoch 1", mutate(func(b []byte) []byte { b[4] = 1; return b })},
		{"ServerHello", mutate(func(b []byte) []byte { b[13] = 2; return b })},
		{"truncated", good[:len(good)-1]},
		{"fragmented", mutate(func(b []byte) []byte { b[13+11]--; return b })},
		{"cookie longer than the message", mutate(func(b []byte) []byte { b[13+12+2]++; return b })},
		{"empty cookie", appendHelloVerifyRequest(nil, 0, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, ok := ParseHelloVerifyRequest(tc.d); ok {
				t.Fatalf("ParseHelloVerifyRequest = % x, true", c)
			}
		})
	}
}

// FuzzParseClientHello: no input panics the parser, and what it reads of a
// ClientHello lies within the datagram as the RFC bounds it.
func FuzzParseClientHello(f *testing.F) {
	f.Add(AppendClientHello(nil, Default()))
	f.Add(AppendClientHello(nil, Spec{RecordVersion: versionDTLS12, Suites: []uint16{0xc02b}}))
	f.Add(append([]byte{22}, bytes.Repeat([]byte{0xaa}, 13)...))
	f.Fuzz(func(t *testing.T, d []byte) {
		ch, err := ParseClientHello(d)
		if err != nil {
			return
		}
		if len(ch.Random) != 32 || len(ch.Session) > 32 || len(ch.Cookie) > 255 || len(ch.Suites) < 2 || len(ch.Comp) < 1 {
			t.Fatalf("ParseClientHello read %+v", ch)
		}
	})
}

// FuzzParseHelloVerifyRequest: no input panics the parser, and a cookie it
// reads is 1 to 255 bytes.
func FuzzParseHelloVerifyRequest(f *testing.F) {
	f.Add(appendHelloVerifyRequest(nil, 0, bytes.Repeat([]byte{0xc0}, 20)))
	f.Add(append([]byte{22}, bytes.Repeat([]byte{0xaa}, 13)...))
	f.Fuzz(func(t *testing.T, d []byte) {
		if c, ok := ParseHelloVerifyRequest(d); ok && (len(c) == 0 || len(c) > 255) {
			t.Fatalf("cookie of %d bytes", len(c))
		}
	})
}
