// Package endpoint holds the syntax of the endpoints a dataplane config
// names: a cluster's peers (an IP address or CIDR prefix in a STATIC
// cluster, a host name in a STRICT_DNS one) and the host:port of the admin
// endpoints. The config validates with it and turns a cluster's endpoints
// into the prefixes the allowlist compiles with it (config.Cluster.Prefixes),
// and the renderer checks the host names it puts in a STRICT_DNS cluster
// with it, so all of them agree on what an endpoint is. It imports nothing
// of Tern.
package endpoint

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ParsePrefix parses a STATIC cluster's endpoint, an IP address or a CIDR
// prefix, into a masked prefix: a bare IPv4 address becomes a /32, a bare
// IPv6 address a /128, and an IPv4-mapped IPv6 address or prefix
// (::ffff:10.0.0.5, ::ffff:10.0.0.0/120) its IPv4 form, since peers are
// matched as IPv4. An IPv6 zone is an error, as is anything else that is
// neither an address nor a prefix (netip's error).
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			// ::ffff:10.0.0.0/104 is 10.0.0.0/8: peers are matched
			// unmapped, as IPv4, so the IPv4-mapped form must be too.
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	// A zone would be silently dropped, and peer addresses never carry one.
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("endpoint %q: IPv6 zone not allowed", s)
	}
	a = a.Unmap()
	return a.Prefix(a.BitLen())
}

// ValidHostname reports whether s is a DNS host name (RFC 1123 labels of
// letters, digits and hyphens, 1-63 bytes each, at most 253 bytes in all,
// with an optional final dot). Underscores are accepted too: they occur in
// real names (SRV-style labels), and the resolver, not the syntax, is the
// judge of what exists.
func ValidHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// ValidHostPort reports whether s is host:port with a numeric port 0-65535;
// the host may be an IP, a name or empty (all interfaces).
func ValidHostPort(s string) bool {
	if _, err := netip.ParseAddrPort(s); err == nil {
		return true
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}
