package turn

import (
	"encoding/binary"
	"net/netip"
)

// Wire constants of RFC 8489 §5-6 and RFC 8656 §12.
const (
	stunHeaderSize   = 20
	attrHeaderSize   = 4
	magicCookie      = 0x2112A442
	channelDataHdr   = 4
	minChannelNumber = 0x4000
	// maxChannelNumber is RFC 5766 §11's upper bound, accepted by default:
	// coturn's turnutils_uclient draws channel numbers at random up to
	// 0x7FFF, and coturn and pion/turn as servers accept them
	// (docs/security.md lists what each client sends).
	maxChannelNumber = 0x7FFF
	// maxStrictChannelNumber is RFC 8656 §12's upper bound: it narrows
	// channel numbers to 0x4000-0x4FFF and reserves 0x5000-0xFFFF, whose
	// first bytes RFC 7983 demultiplexes as other protocols on a shared
	// port. With Settings.StrictChannelNumbers a ChannelBind above it gets
	// 400 and ChannelData there is dropped as malformed.
	maxStrictChannelNumber = 0x4FFF

	// Message types (method | class bits) used on the zero-allocation paths.
	typeSendIndication = 0x0016
	typeDataIndication = 0x0017

	attrXORPeerAddress = 0x0012
	attrData           = 0x0013
	attrDontFragment   = 0x001A
	attrFingerprint    = 0x8028

	familyIPv4 = 0x01
	familyIPv6 = 0x02
)

// PeerHeadroom is how many bytes HandlePeer needs in front of a peer's
// payload to frame it in place: a Data indication header (20 bytes), an IPv6
// XOR-PEER-ADDRESS (24 bytes) and the DATA attribute header (4 bytes).
const PeerHeadroom = stunHeaderSize + attrHeaderSize + 20 + attrHeaderSize

// PeerTailroom is how many bytes HandlePeer may write after the payload: the
// padding of a DATA attribute or of stream-framed ChannelData (RFC 8656 §12.5).
const PeerTailroom = 3

func pad4(n int) int { return (n + 3) &^ 3 }

// putXORAddr writes the value of an XOR-*-ADDRESS attribute (RFC 8489 §14.2)
// for ap into b, which must hold 8 (IPv4) or 20 (IPv6) bytes, and returns the
// length written. txid is the message's 12-byte transaction ID.
func putXORAddr(b []byte, ap netip.AddrPort, txid []byte) int {
	b[0] = 0
	binary.BigEndian.PutUint16(b[2:4], ap.Port()^(magicCookie>>16))
	addr := ap.Addr()
	if addr.Is4() || addr.Is4In6() {
		b[1] = familyIPv4
		a4 := addr.Unmap().As4()
		binary.BigEndian.PutUint32(b[4:8], binary.BigEndian.Uint32(a4[:])^magicCookie)
		return 8
	}
	b[1] = familyIPv6
	a16 := addr.As16()
	var key [16]byte
	binary.BigEndian.PutUint32(key[0:4], magicCookie)
	copy(key[4:], txid)
	for i := range 16 {
		b[4+i] = a16[i] ^ key[i]
	}
	return 20
}

// xorAddrLen is the value length of an XOR address attribute for ap.
func xorAddrLen(ap netip.AddrPort) int {
	if a := ap.Addr(); a.Is4() || a.Is4In6() {
		return 8
	}
	return 20
}

// parseXORAddr decodes the value of an XOR-*-ADDRESS attribute. It reports
// false for a truncated value or an unknown family.
func parseXORAddr(v []byte, txid []byte) (netip.AddrPort, bool) {
	if len(v) < 8 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(v[2:4]) ^ (magicCookie >> 16)
	switch v[1] {
	case familyIPv4:
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(v[4:8])^magicCookie)
		return netip.AddrPortFrom(netip.AddrFrom4(a), port), true
	case familyIPv6:
		if len(v) < 20 || len(txid) != 12 {
			return netip.AddrPort{}, false
		}
		var key, a [16]byte
		binary.BigEndian.PutUint32(key[0:4], magicCookie)
		copy(key[4:], txid)
		for i := range 16 {
			a[i] = v[4+i] ^ key[i]
		}
		return netip.AddrPortFrom(netip.AddrFrom16(a), port), true
	}
	return netip.AddrPort{}, false
}

// isChannelData reports whether b starts like a ChannelData message (RFC
// 8656 §12.4: first two bits 01, so numbers 0x4000-0x7FFF). A number
// with no channel bound is dropped by channelData.
func isChannelData(b []byte) bool { return len(b) >= 1 && b[0]&0xC0 == 0x40 }

// isSTUN reports whether b starts like a STUN message (RFC 8489 §5: first two
// bits 00, magic cookie in place, length a multiple of 4).
func isSTUN(b []byte) bool {
	return len(b) >= stunHeaderSize && b[0]&0xC0 == 0 &&
		binary.BigEndian.Uint32(b[4:8]) == magicCookie &&
		binary.BigEndian.Uint16(b[2:4])&3 == 0
}
