// Package turnclient is the TURN client side of ternbench: just enough of
// RFC 8656 to set up relaying (Allocate with long-term credentials,
// CreatePermission, ChannelBind, Refresh) on a UDP socket the caller owns or
// over any client transport (Dial: UDP, TCP, TLS, DTLS; streams framed as
// RFC 8656 §12.5 says, by FrameReader), and
// to pre-build the frames (ChannelData, Send indications) that the load
// generator then sends without touching this package again.
//
// Setup is a plain request/response loop with retransmission; it is not on
// the measured path. Over a UDP socket of its own (New), an Allocate
// answered with 300 Try Alternate is sent again to the ALTERNATE-SERVER,
// never to a server the client has tried (RFC 8489 §10); Server says where
// the client ended up. Messages are encoded with github.com/pion/stun/v2.
package turnclient
