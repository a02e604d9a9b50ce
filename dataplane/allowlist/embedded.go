package allowlist

import "net/netip"

// Well-known translation and tunnel prefixes.
var (
	nat64WKP   = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052 §2.1
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
	sixToFour  = netip.MustParsePrefix("2002::/16")       // RFC 3056 §2
	teredo     = netip.MustParsePrefix("2001::/32")       // RFC 4380 §4
	compatible = netip.MustParsePrefix("::/96")           // RFC 4291 §2.5.5.1
	translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 §2.1 (SIIT)
)

// embedded returns the IPv4 addresses that the IPv6 address ip carries,
// by the rules of the prefix it is in: a translator or a tunnel delivers
// packets for ip to them (IPv4-mapped addresses are unmapped
// before, by Cluster):
//   - 64:ff9b::/96, NAT64's well-known prefix: the last 32 bits (RFC 6052
//     §2.2).
//   - 64:ff9b:1::/48, NAT64's local-use prefix: the operator picks the
//     prefix length, /48, /56, /64 or /96 inside it, so every one of the
//     four RFC 6052 §2.2 positions is returned (bits 48-63 and 72-87;
//     56-63 and 72-95; 72-103; 96-127), except those that give an
//     address in 0.0.0.0/8: the positions a prefix does not use are
//     zero, so every address of a /96 prefix would give 0.0.0.0 at the
//     /48 position and be refused.
//   - 2002::/16, 6to4: bits 16-47 (RFC 3056 §2).
//   - 2001::/32, Teredo: the client's address, bits 96-127 XOR 0xffffffff
//     (RFC 4380 §4), where the Teredo relay sends the packets.
//   - ::/96, IPv4-compatible (deprecated, RFC 4291 §2.5.5.1), except :: and
//     ::1, which are the IPv6 unspecified and loopback addresses; and
//     ::ffff:0:0:0/96, IPv4-translated (RFC 2765 §2.1): the last 32 bits.
//
// It returns n addresses in out; it does not allocate.
func embedded(ip netip.Addr) (out [4]netip.Addr, n int) {
	if !ip.Is6() || ip.Is4In6() {
		return out, 0
	}
	b := ip.As16()
	v4 := func(a, b2, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b2, c, d}) }
	switch {
	case nat64WKP.Contains(ip), translated.Contains(ip):
		out[0] = v4(b[12], b[13], b[14], b[15])
		return out, 1
	case nat64Local.Contains(ip):
		for _, a := range [4]netip.Addr{v4(b[6], b[7], b[9], b[10]), v4(b[7], b[9], b[10], b[11]), v4(b[9], b[10], b[11], b[12]), v4(b[12], b[13], b[14], b[15])} {
			if a.As4()[0] != 0 {
				out[n] = a
				n++
			}
		}
		return out, n
	case sixToFour.Contains(ip):
		out[0] = v4(b[2], b[3], b[4], b[5])
		return out, 1
	case teredo.Contains(ip):
		out[0] = v4(^b[12], ^b[13], ^b[14], ^b[15])
		return out, 1
	case compatible.Contains(ip):
		if a := v4(b[12], b[13], b[14], b[15]); a.As4() != [4]byte{0, 0, 0, 0} && a.As4() != [4]byte{0, 0, 0, 1} {
			out[0] = a
			return out, 1
		}
	}
	return out, 0
}
