// Package forwarder is the ceiling of ternbench: a UDP forwarder with no
// TURN at all, shaped like a TURN server's data path so that the kernel work
// per packet is the same (receive on a listener socket, send from a
// per-client relay socket to the peer; receive on the relay socket, send
// from the listener socket back to the client), in recvmmsg/sendmmsg
// batches. Whatever a TURN server spends above it is the cost of TURN.
//
// Protocol (all on the listener port):
//
//	bind:   client -> "TFWD" 'B' peerIPv4(4) peerPort(2)   (11 bytes)
//	        forwarder -> "TFWD" 'B' relayIPv4(4) relayPort(2)
//	unbind: client -> "TFWD" 'U' 0(6)                      (no reply)
//	data:   any other datagram is forwarded verbatim to the client's peer;
//	        datagrams arriving at the client's relay socket go back to it.
//
// A data datagram that happens to look like a bind or unbind is taken as
// one; the harness's payloads never do.
package forwarder

import (
	"encoding/binary"
	"net/netip"
)

// CtlLen is the length of a control message in bytes.
const CtlLen = 11

var magic = [4]byte{'T', 'F', 'W', 'D'}

// Control operations.
const (
	OpBind   = 'B'
	OpUnbind = 'U'
)

// Control encodes a control message for op carrying addr (IPv4 only: the
// forwarder exists for loopback benchmarks).
func Control(op byte, addr netip.AddrPort) []byte {
	b := make([]byte, CtlLen)
	copy(b, magic[:])
	b[4] = op
	if addr.Addr().Is4() || addr.Addr().Is4In6() {
		ip := addr.Addr().Unmap().As4()
		copy(b[5:9], ip[:])
	}
	binary.BigEndian.PutUint16(b[9:], addr.Port())
	return b
}

// ParseControl decodes a control message; ok is false for data.
func ParseControl(b []byte) (op byte, addr netip.AddrPort, ok bool) {
	if len(b) != CtlLen || [4]byte(b[:4]) != magic || (b[4] != OpBind && b[4] != OpUnbind) {
		return 0, netip.AddrPort{}, false
	}
	return b[4], netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[5:9])), binary.BigEndian.Uint16(b[9:])), true
}
