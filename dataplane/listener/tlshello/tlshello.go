// Package tlshello reads a TLS ClientHello without terminating TLS, as far
// as its SNI (RFC 6066 §3) and ALPN (RFC 7301 §3.1) offers, so that a
// TURN-TLS listener with an upstream can route a connection to TURN-TLS
// (ALPN "stun.turn", RFC 7443 §3, or one of the listener's TURN names) or
// splice it, byte for byte, to the site's HTTPS server. It reads at most
// MaxSize bytes and keeps no state between calls; the caller sets the
// deadline.
package tlshello

import (
	"errors"
	"io"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// MaxSize caps the bytes read for a connection's ClientHello, TLS
// record headers included. Browsers' ClientHellos are under 2 KiB, with a
// post-quantum key share under 2.5 KiB; 16 KiB is a TLS record's most.
const MaxSize = 16 << 10

// ALPNTURN is the ALPN protocol ID of TURN (RFC 7443 §3).
const ALPNTURN = "stun.turn"

var (
	// ErrNotHandshake: the first record is not a TLS handshake record
	// holding a ClientHello.
	ErrNotHandshake = errors.New("not a TLS ClientHello")
	// ErrBadHello: the ClientHello is malformed.
	ErrBadHello = errors.New("malformed TLS ClientHello")
	// ErrTooLarge: the ClientHello does not fit in MaxSize.
	ErrTooLarge = errors.New("TLS ClientHello over 16 KiB")
)

// ClientHello is what a listener with an upstream routes a connection by.
type ClientHello struct {
	// serverName is the SNI host name (RFC 6066 §3); "" when absent.
	ServerName string
	// alpn are the offered ALPN protocol IDs (RFC 7301 §3.1).
	ALPN []string
}

// Parse parses the first TLS records of a connection, raw, as
// far as the ClientHello's SNI and ALPN. It returns complete false and no
// error while raw holds only a prefix of a valid ClientHello (the message
// may span several records, each read in several parts); what follows a
// whole ClientHello (TLS 1.3 early data, say) is not looked at. Errors:
// ErrNotHandshake, ErrBadHello, ErrTooLarge.
func Parse(raw []byte) (h ClientHello, complete bool, err error) {
	var msg []byte // the handshake bytes of the records so far
	for rest := raw; len(rest) > 0; {
		if rest[0] != 22 { // RFC 8446 §5.1: ContentType handshake
			return h, false, ErrNotHandshake
		}
		if len(rest) >= 2 && rest[1] != 3 { // legacy_record_version 0x03xx
			return h, false, ErrNotHandshake
		}
		if len(rest) < 5 {
			break
		}
		n := int(rest[3])<<8 | int(rest[4])
		if n == 0 || n > 1<<14 {
			return h, false, ErrBadHello
		}
		frag := rest[5:min(len(rest), 5+n)]
		msg = append(msg, frag...)
		rest = rest[5+len(frag):]
		if len(msg) > 0 && msg[0] != 1 { // HandshakeType client_hello
			return h, false, ErrNotHandshake
		}
		if len(msg) < 4 {
			continue
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if size > MaxSize {
			return h, false, ErrTooLarge
		}
		if len(msg) >= 4+size {
			h, ok := parseHelloBody(msg[4 : 4+size])
			if !ok {
				return ClientHello{}, false, ErrBadHello
			}
			return h, true, nil
		}
	}
	return h, false, checkSize(raw)
}

// checkSize is the error of an incomplete ClientHello of len(raw) bytes.
func checkSize(raw []byte) error {
	if len(raw) >= MaxSize {
		return ErrTooLarge
	}
	return nil
}

// parseHelloBody parses a ClientHello's body (RFC 8446 §4.1.2, RFC 5246
// §7.4.1.2) for its server_name and application_layer_protocol_negotiation
// extensions.
func parseHelloBody(b []byte) (h ClientHello, ok bool) {
	s := cryptobyte.String(b)
	var sessionID, suites, compression cryptobyte.String
	if !s.Skip(2+32) || // legacy_version, random
		!s.ReadUint8LengthPrefixed(&sessionID) ||
		!s.ReadUint16LengthPrefixed(&suites) ||
		!s.ReadUint8LengthPrefixed(&compression) {
		return h, false
	}
	if s.Empty() { // no extensions (TLS 1.0-1.2 allow that)
		return h, true
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return h, false
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return h, false
		}
		switch typ {
		case 0: // server_name, RFC 6066 §3
			var list cryptobyte.String
			if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
				return h, false
			}
			for !list.Empty() {
				var nameType uint8
				var name cryptobyte.String
				if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) {
					return h, false
				}
				if nameType == 0 && h.ServerName == "" { // host_name
					h.ServerName = strings.TrimSuffix(string(name), ".")
				}
			}
		case 16: // application_layer_protocol_negotiation, RFC 7301 §3.1
			var list cryptobyte.String
			if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() {
				return h, false
			}
			for !list.Empty() {
				var proto cryptobyte.String
				if !list.ReadUint8LengthPrefixed(&proto) || len(proto) == 0 {
					return h, false
				}
				h.ALPN = append(h.ALPN, string(proto))
			}
		}
	}
	return h, true
}

// Read reads a connection's first bytes until they hold a
// whole ClientHello, and returns it with every byte read, which the caller
// replays to the TLS server or the upstream. r's read deadline bounds it;
// the errors are r's and Parse's (io.ErrUnexpectedEOF for a
// ClientHello cut short by the client's EOF).
func Read(r io.Reader) (ClientHello, []byte, error) {
	raw := make([]byte, 0, 2048)
	for {
		if len(raw) == cap(raw) {
			raw = append(raw, make([]byte, min(cap(raw), MaxSize-cap(raw)))...)[:len(raw)]
		}
		n, err := r.Read(raw[len(raw):min(cap(raw), MaxSize)])
		raw = raw[:len(raw)+n]
		if n > 0 {
			h, complete, perr := Parse(raw)
			if perr != nil || complete {
				return h, raw, perr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ClientHello{}, raw, err
		}
	}
}

// IsTURN reports whether a connection that sent h is TURN-TLS on a
// listener with an upstream whose TURN server names are names: its ALPN
// offers "stun.turn" (RFC 7443), its SNI is one of names, or it sends
// neither ALPN nor SNI, as libwebrtc does to a turns: URL with an IP
// address. Every HTTPS client of note sends ALPN (h2, http/1.1), or SNI
// when it reaches the site by name.
func (h *ClientHello) IsTURN(names []string) bool {
	for _, p := range h.ALPN {
		if p == ALPNTURN {
			return true
		}
	}
	for _, n := range names {
		if h.ServerName != "" && strings.EqualFold(strings.TrimSuffix(n, "."), h.ServerName) {
			return true
		}
	}
	return len(h.ALPN) == 0 && h.ServerName == ""
}
