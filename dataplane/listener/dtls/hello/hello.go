// Package hello reads the first flight of a DTLS 1.2 handshake as a
// TURN-DTLS listener's reader sees it, before and beside pion/dtls: a
// ClientHello, parsed before any association exists (RFC 6347 §4.2.1,
// §4.3.2; RFC 5246 §7.4.1.2) and again, for its cookie, until the
// association is verified; and pion's HelloVerifyRequest, parsed for the
// cookie it gives the client. It keeps no state and never panics on any
// input; Spec and AppendClientHello encode ClientHellos for tests and
// floods.
package hello

import (
	"encoding/binary"
	"errors"

	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
)

// Handshake message types (RFC 5246 §7.4, RFC 6347 §4.3.2).
const (
	handshakeClientHello        = 1
	handshakeHelloVerifyRequest = 3
	// handshakeHeaderLen is a DTLS handshake header: msg_type, length,
	// message_seq, fragment_offset, fragment_length.
	handshakeHeaderLen = 12
)

// DTLS protocol versions on the wire (RFC 6347 §4.1): 1.0 and 1.2.
var (
	versionDTLS10 = [2]byte{0xfe, 0xff}
	versionDTLS12 = [2]byte{0xfe, 0xfd}
)

// ErrNotClientHello is why a datagram from an address with no association
// is dropped: it does not start with a whole, unfragmented, well-formed
// DTLS 1.0 or 1.2 ClientHello record of epoch 0.
var ErrNotClientHello = errors.New("not a ClientHello")

// ClientHello is what the listener reads of a ClientHello. Its slices point
// into the datagram it was parsed from.
type ClientHello struct {
	// RecordSeq is the record's sequence number (48 bits), which the
	// HelloVerifyRequest echoes (RFC 6347 §4.2.1).
	RecordSeq uint64
	// MessageSeq is the handshake message_seq: 0 in a client's first
	// ClientHello, 1 in the one answering a HelloVerifyRequest.
	MessageSeq uint16
	// Version is client_version.
	Version [2]byte
	Random  []byte // 32 bytes
	Session []byte // session_id, up to 32 bytes
	Cookie  []byte // up to 255 bytes; empty in a first ClientHello
	Suites  []byte // cipher_suites, 2 bytes each, at least one
	Comp    []byte // compression_methods, at least one
}

// ParseClientHello reads the ClientHello that datagram d starts with: a
// handshake record of epoch 0 with record version DTLS 1.0 or 1.2 (a
// first ClientHello may use 1.0, RFC 6347 §4.1), whose first handshake
// message is a ClientHello carried whole, not fragmented, with its
// lengths consistent (the extensions, if any, fill the rest of the
// message; they are not read). Further records in the datagram are not
// read here: pion/dtls reads the datagram again. It returns
// ErrNotClientHello for anything else, and never panics.
//
// A ClientHello split over several records or datagrams is not taken: a
// listener keeping no state for an address cannot reassemble it (OpenSSL's
// DTLSv1_listen makes the same choice), and the ClientHellos of browsers,
// coturn and pion are a few hundred bytes.
func ParseClientHello(d []byte) (ClientHello, error) {
	var ch ClientHello
	if len(d) < record.Header+handshakeHeaderLen || d[0] != record.ContentHandshake {
		return ch, ErrNotClientHello
	}
	if v := [2]byte{d[1], d[2]}; v != versionDTLS10 && v != versionDTLS12 {
		return ch, ErrNotClientHello
	}
	es := binary.BigEndian.Uint64(d[3:11])
	if es>>48 != 0 { // epoch
		return ch, ErrNotClientHello
	}
	ch.RecordSeq = es & (1<<48 - 1)
	rlen := int(binary.BigEndian.Uint16(d[11:13]))
	if record.Header+rlen > len(d) {
		return ch, ErrNotClientHello
	}
	h := d[record.Header : record.Header+rlen]
	if len(h) < handshakeHeaderLen || h[0] != handshakeClientHello {
		return ch, ErrNotClientHello
	}
	mlen := uint24(h[1:4])
	ch.MessageSeq = binary.BigEndian.Uint16(h[4:6])
	if uint24(h[6:9]) != 0 || uint24(h[9:12]) != mlen || handshakeHeaderLen+mlen > len(h) {
		return ch, ErrNotClientHello
	}
	b := h[handshakeHeaderLen : handshakeHeaderLen+mlen]
	if len(b) < 2+32 {
		return ch, ErrNotClientHello
	}
	ch.Version = [2]byte{b[0], b[1]}
	ch.Random = b[2:34]
	b = b[34:]
	var ok bool
	if ch.Session, b, ok = vector8(b, 32); !ok {
		return ch, ErrNotClientHello
	}
	if ch.Cookie, b, ok = vector8(b, 255); !ok {
		return ch, ErrNotClientHello
	}
	if len(b) < 2 {
		return ch, ErrNotClientHello
	}
	n := int(binary.BigEndian.Uint16(b))
	if n < 2 || n%2 != 0 || 2+n > len(b) {
		return ch, ErrNotClientHello
	}
	ch.Suites, b = b[2:2+n], b[2+n:]
	if ch.Comp, b, ok = vector8(b, 255); !ok || len(ch.Comp) == 0 {
		return ch, ErrNotClientHello
	}
	// Extensions, when present, are one vector filling the rest of the
	// message (RFC 5246 §7.4.1.2).
	if len(b) != 0 && (len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2) {
		return ch, ErrNotClientHello
	}
	return ch, nil
}

// vector8 splits a vector with a one-byte length of at most max bytes off
// b.
func vector8(b []byte, max int) (v, rest []byte, ok bool) {
	if len(b) < 1 {
		return nil, nil, false
	}
	n := int(b[0])
	if n > max || 1+n > len(b) {
		return nil, nil, false
	}
	return b[1 : 1+n], b[1+n:], true
}

func uint24(b []byte) int { return int(b[0])<<16 | int(b[1])<<8 | int(b[2]) }

// ParseHelloVerifyRequest reads the cookie of the HelloVerifyRequest that
// datagram d, written by pion/dtls to a client, starts with (RFC 6347
// §4.2.1, §4.3.2): a handshake record of epoch 0 whose message is a whole
// HelloVerifyRequest. It reports false for anything else. The cookie
// points into d.
func ParseHelloVerifyRequest(d []byte) (cookie []byte, ok bool) {
	if len(d) < record.Header+handshakeHeaderLen || d[0] != record.ContentHandshake ||
		binary.BigEndian.Uint16(d[3:5]) != 0 {
		return nil, false
	}
	rlen := int(binary.BigEndian.Uint16(d[11:13]))
	if record.Header+rlen > len(d) {
		return nil, false
	}
	h := d[record.Header : record.Header+rlen]
	if len(h) < handshakeHeaderLen || h[0] != handshakeHelloVerifyRequest {
		return nil, false
	}
	mlen := uint24(h[1:4])
	if uint24(h[6:9]) != 0 || uint24(h[9:12]) != mlen || handshakeHeaderLen+mlen > len(h) {
		return nil, false
	}
	b := h[handshakeHeaderLen : handshakeHeaderLen+mlen]
	if len(b) < 2 {
		return nil, false
	}
	cookie, rest, ok := vector8(b[2:], 255)
	if !ok || len(rest) != 0 || len(cookie) == 0 {
		return nil, false
	}
	return cookie, true
}
