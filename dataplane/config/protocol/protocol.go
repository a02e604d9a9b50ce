// Package protocol is the table of listener protocols of the dataplane
// config: TURN (RFC 8656) over UDP, TCP, TLS or DTLS, each with its
// properties (transport, secure, datagram or stream, default port, TURN URI
// scheme). It is part of the config contract (a config.Listener's Protocol
// is a Protocol), in a leaf package of its own because both sides read the
// table on its own: ternd's listener starts a transport by it, the renderer
// sets Service ports by it, the auth service writes TURN URIs by it, ternd
// -f and bench name protocols with it. It imports nothing of Tern.
package protocol

import "strings"

// Protocol is a listener's protocol: TURN (RFC 8656) over one transport,
// spelled as STUNner's Gateway listeners spell it ("TURN-UDP"). Its
// properties live in one table (protocols, below): adding a protocol means
// adding a row there and its transport in dataplane/listener, and every
// reader of a protocol (the config's validation, the renderer's Service
// ports, the auth service's TURN URIs, ternd -f) follows.
type Protocol string

// Listener protocols, spelled as in the Gateway API listeners of STUNner.
const (
	TURNUDP  Protocol = "TURN-UDP"
	TURNTCP  Protocol = "TURN-TCP"
	TURNTLS  Protocol = "TURN-TLS"
	TURNDTLS Protocol = "TURN-DTLS"
)

// Transport is the IP transport a protocol runs over, lower case as in a
// TURN URI's "transport" parameter (RFC 7065 §3.1).
type Transport string

// The IP transports.
const (
	TransportUDP Transport = "udp"
	TransportTCP Transport = "tcp"
)

// Info is what one listener protocol is.
type Info struct {
	// Protocol is the canonical name.
	Protocol Protocol
	// Alias is the bare name STUNner's operator also reads as this
	// protocol in a Gateway listener (its published manifests say
	// `protocol: UDP`).
	Alias string
	// Transport is the IP transport the listener binds: a DTLS listener
	// is a UDP socket, a TLS listener a TCP one.
	Transport Transport
	// Secure is TLS (RFC 8656 §3.1) or DTLS (RFC 7350): the listener
	// needs a certificate and key, and TURN URIs use the turns scheme.
	Secure bool
	// Datagram is true when each TURN message or ChannelData message comes
	// in a datagram of its own (UDP, DTLS records), false when messages are
	// framed in a byte stream (TCP, TLS; RFC 8656 §12.5 pads ChannelData
	// there).
	Datagram bool
	// DefaultPort is the IANA port of the TURN URI scheme (RFC 7065 §3:
	// 3478 for turn over UDP and TCP, 5349 for turns over TLS; RFC 7350
	// §4.2 gives DTLS 5349 too). STUNner's listeners default to 3478
	// whatever the protocol; its adapters keep that.
	DefaultPort int
}

// URIScheme is the TURN URI scheme for p (RFC 7065 §3.1): turns for a
// secure protocol, turn otherwise.
func (p Info) URIScheme() string {
	if p.Secure {
		return "turns"
	}
	return "turn"
}

// protocols is the one table of listener protocols, in the order error
// messages list them.
var protocols = []Info{
	{Protocol: TURNUDP, Alias: "UDP", Transport: TransportUDP, Datagram: true, DefaultPort: 3478},
	{Protocol: TURNTCP, Alias: "TCP", Transport: TransportTCP, DefaultPort: 3478},
	{Protocol: TURNTLS, Alias: "TLS", Transport: TransportTCP, Secure: true, DefaultPort: 5349},
	{Protocol: TURNDTLS, Alias: "DTLS", Transport: TransportUDP, Secure: true, Datagram: true, DefaultPort: 5349},
}

// All returns the listener protocols Tern serves, in a fixed order (UDP,
// TCP, TLS, DTLS). The slice is a copy.
func All() []Info {
	return append([]Info(nil), protocols...)
}

// Info returns p's properties, and false when p is not a protocol of the
// table (Normalize first to accept aliases and any case).
func (p Protocol) Info() (Info, bool) {
	for _, i := range protocols {
		if i.Protocol == p {
			return i, true
		}
	}
	return Info{}, false
}

// Valid reports whether p is one of the table's protocols, spelled
// canonically.
func (p Protocol) Valid() bool { _, ok := p.Info(); return ok }

// Transport returns the IP transport of p; "" when p is not valid.
func (p Protocol) Transport() Transport { i, _ := p.Info(); return i.Transport }

// Secure reports whether p is TLS or DTLS (false when p is not valid).
func (p Protocol) Secure() bool { i, _ := p.Info(); return i.Secure }

// Datagram reports whether p carries one message per datagram (false
// when p is not valid).
func (p Protocol) Datagram() bool { i, _ := p.Info(); return i.Datagram }

// Normalize maps a listener protocol name, case-insensitively, to
// its Protocol and reports whether it is one. The bare transport names
// UDP, TCP, TLS and DTLS are aliases, as STUNner's operator reads a
// Gateway listener's protocol; every place that reads a protocol (the
// config, the renderer, the auth service's TURN URIs, ternd -f) calls
// this one function.
func Normalize(s string) (Protocol, bool) {
	u := strings.ToUpper(s)
	for _, i := range protocols {
		if u == string(i.Protocol) || u == i.Alias {
			return i.Protocol, true
		}
	}
	return "", false
}

// list lists the names joined by sep and, before the last, last:
// "TURN-UDP, TURN-TCP, TURN-TLS or TURN-DTLS".
func list(sep, last string, name func(Info) string) string {
	var b strings.Builder
	for k, i := range protocols {
		switch {
		case k == 0:
		case k == len(protocols)-1:
			b.WriteString(last)
		default:
			b.WriteString(sep)
		}
		b.WriteString(name(i))
	}
	return b.String()
}

// Names lists the accepted protocol names for error messages:
// "TURN-UDP, TURN-TCP, TURN-TLS or TURN-DTLS (or UDP, TCP, TLS, DTLS)".
func Names() string {
	return list(", ", " or ", func(i Info) string { return string(i.Protocol) }) +
		" (or " + list(", ", ", ", func(i Info) string { return i.Alias }) + ")"
}

// Canonical lists the canonical names, comma-separated, for error messages:
// "TURN-UDP, TURN-TCP, TURN-TLS, TURN-DTLS".
func Canonical() string {
	return list(", ", ", ", func(i Info) string { return string(i.Protocol) })
}
