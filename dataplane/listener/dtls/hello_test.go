package dtls

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// helloSpec is a ClientHello for tests to encode (appendClientHello).
type helloSpec struct {
	recordVersion [2]byte
	recordSeq     uint64
	messageSeq    uint16
	random        byte // every byte of the random
	session       []byte
	cookie        []byte
	suites        []uint16
	extensions    []byte // appended as they are, after a length
}

// defaultHello is a ClientHello as pion's client sends it first: record
// version DTLS 1.0, no cookie, two AES-GCM suites, the null compression.
func defaultHello() helloSpec {
	return helloSpec{recordVersion: versionDTLS10, random: 7, suites: []uint16{0xc02b, 0xc02f},
		extensions: []byte{0x00, 0x17, 0x00, 0x00}} // extended_master_secret
}

// appendClientHello encodes h as one datagram: one record, one whole
// handshake message (RFC 6347 §4.2.2, §4.3.2).
func appendClientHello(dst []byte, h helloSpec) []byte {
	var body []byte
	body = append(body, versionDTLS12[0], versionDTLS12[1])
	body = append(body, bytes.Repeat([]byte{h.random}, 32)...)
	body = append(body, byte(len(h.session)))
	body = append(body, h.session...)
	body = append(body, byte(len(h.cookie)))
	body = append(body, h.cookie...)
	body = binary.BigEndian.AppendUint16(body, uint16(2*len(h.suites)))
	for _, s := range h.suites {
		body = binary.BigEndian.AppendUint16(body, s)
	}
	body = append(body, 1, 0) // compression_methods: null
	if h.extensions != nil {
		body = binary.BigEndian.AppendUint16(body, uint16(len(h.extensions)))
		body = append(body, h.extensions...)
	}
	n := len(body)
	dst = append(dst, 22, h.recordVersion[0], h.recordVersion[1])
	dst = binary.BigEndian.AppendUint64(dst, h.recordSeq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(handshakeHeaderLen+n))
	dst = append(dst, handshakeClientHello, byte(n>>16), byte(n>>8), byte(n))
	dst = binary.BigEndian.AppendUint16(dst, h.messageSeq)
	dst = append(dst, 0, 0, 0, byte(n>>16), byte(n>>8), byte(n))
	return append(dst, body...)
}

func TestParseClientHello(t *testing.T) {
	ok := defaultHello()
	ok.recordSeq, ok.messageSeq, ok.session, ok.cookie = 5, 1, []byte{1, 2, 3}, bytes.Repeat([]byte{9}, 20)
	good := appendClientHello(nil, ok)
	ch, err := parseClientHello(good)
	if err != nil {
		t.Fatalf("parseClientHello(a valid ClientHello) = %v", err)
	}
	if ch.recordSeq != 5 || ch.messageSeq != 1 || ch.version != versionDTLS12 || !bytes.Equal(ch.random, bytes.Repeat([]byte{7}, 32)) ||
		!bytes.Equal(ch.session, []byte{1, 2, 3}) || !bytes.Equal(ch.cookie, ok.cookie) ||
		!bytes.Equal(ch.suites, []byte{0xc0, 0x2b, 0xc0, 0x2f}) || !bytes.Equal(ch.comp, []byte{0}) {
		t.Fatalf("parseClientHello read %+v", ch)
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
		{"session id of 33 bytes", appendClientHello(nil, helloSpec{recordVersion: versionDTLS12, session: make([]byte, 33), suites: []uint16{1}})},
		{"no cipher suite", appendClientHello(nil, helloSpec{recordVersion: versionDTLS12})},
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
			if _, err := parseClientHello(tc.d); err != errNotClientHello {
				t.Fatalf("parseClientHello = %v, want errNotClientHello", err)
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
	if c, ok := parseHelloVerifyRequest(good); !ok || !bytes.Equal(c, cookie) {
		t.Fatalf("parseHelloVerifyRequest = % x, %v", c, ok)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		d    []byte
	}{
		{"empty", nil},
		{"ClientHello", appendClientHello(nil, defaultHello())},
		{"epoch 1", mutate(func(b []byte) []byte { b[4] = 1; return b })},
		{"ServerHello", mutate(func(b []byte) []byte { b[13] = 2; return b })},
		{"truncated", good[:len(good)-1]},
		{"fragmented", mutate(func(b []byte) []byte { b[13+11]--; return b })},
		{"cookie longer than the message", mutate(func(b []byte) []byte { b[13+12+2]++; return b })},
		{"empty cookie", appendHelloVerifyRequest(nil, 0, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, ok := parseHelloVerifyRequest(tc.d); ok {
				t.Fatalf("parseHelloVerifyRequest = % x, true", c)
			}
		})
	}
}

// FuzzParseClientHello: no input panics the parser, and what it reads of a
// ClientHello lies within the datagram as the RFC bounds it.
func FuzzParseClientHello(f *testing.F) {
	f.Add(appendClientHello(nil, defaultHello()))
	f.Add(appendClientHello(nil, helloSpec{recordVersion: versionDTLS12, suites: []uint16{0xc02b}}))
	f.Add(append([]byte{22}, bytes.Repeat([]byte{0xaa}, 13)...))
	f.Fuzz(func(t *testing.T, d []byte) {
		ch, err := parseClientHello(d)
		if err != nil {
			return
		}
		if len(ch.random) != 32 || len(ch.session) > 32 || len(ch.cookie) > 255 || len(ch.suites) < 2 || len(ch.comp) < 1 {
			t.Fatalf("parseClientHello read %+v", ch)
		}
	})
}

// FuzzParseHelloVerifyRequest: no input panics the parser, and a cookie it
// reads is 1 to 255 bytes.
func FuzzParseHelloVerifyRequest(f *testing.F) {
	f.Add(appendHelloVerifyRequest(nil, 0, bytes.Repeat([]byte{0xc0}, 20)))
	f.Add(append([]byte{22}, bytes.Repeat([]byte{0xaa}, 13)...))
	f.Fuzz(func(t *testing.T, d []byte) {
		if c, ok := parseHelloVerifyRequest(d); ok && (len(c) == 0 || len(c) > 255) {
			t.Fatalf("cookie of %d bytes", len(c))
		}
	})
}
