// Package turnclient is the TURN client side of ternbench: just enough of
// RFC 8656 to set up relaying (Allocate with long-term credentials,
// CreatePermission, ChannelBind, Refresh) on a UDP socket the caller owns or
// over any client transport (Dial: UDP, TCP, TLS, DTLS; streams framed as
// RFC 8656 §12.5 says, by FrameReader), and
// to pre-build the frames (ChannelData, Send indications) that the load
// generator then sends without touching this package again.
//
// Setup is a plain request/response loop with retransmission; it is not on
// the measured path. Messages are encoded with github.com/pion/stun/v2.
package turnclient
