// Package allowlist compiles a listener's routes into the set of peers its
// clients may reach through a relay, and answers that question on the
// packet path without allocating. See docs/security.md.
package allowlist

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// rule is one allowed peer prefix with an optional port range.
type rule struct {
	prefix    netip.Prefix
	minPort   uint16
	maxPort   uint16 // 0: all ports
	sensitive bool   // the prefix lies inside a protected range: it names it explicitly
	cluster   uint32 // ClusterIDs' number of the cluster the rule comes from
}

// List is a listener's compiled peer allowlist: the union of the clusters
// its routes name, minus the protected ranges that only an explicit cluster
// opens, minus the dataplane's own UDP listeners, which nothing opens. It is
// immutable; a config change builds a new one and swaps it in.
type List struct {
	rules     []rule
	protected []netip.Prefix
	self      []netip.Addr // Self.Addrs, unmapped
	selfPorts []uint16     // Self.Ports
}

// defaultProtected are ranges a peer may be in only when a cluster names them
// explicitly (a prefix inside the range, not a wider one that covers it):
// loopback, link-local (which holds the cloud metadata address
// 169.254.169.254 of most clouds), unspecified, multicast, and the cloud
// metadata and platform addresses outside link-local. docs/security.md
// gives the source of each address.
var defaultProtected = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud ECS metadata
	netip.MustParsePrefix("100.96.0.96/32"),     // Volcengine ECS metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure WireServer (agent, DNS, DHCP)
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud (Classic, Cloud@Customer) metadata
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS EC2 metadata over IPv6
	netip.MustParsePrefix("fd00:ec2::253/128"),  // AWS Route 53 Resolver over IPv6
	netip.MustParsePrefix("fd00:ec2::123/128"),  // AWS Time Sync over IPv6
}

// Self is what an allowlist knows of the dataplane itself.
type Self struct {
	// Addrs are the dataplane's own addresses: listener addresses, relay
	// addresses (bind and public) and, when a listener binds a wildcard,
	// the host's interface addresses. They are protected like loopback.
	Addrs []netip.Addr
	// Ports are the ports of the UDP-based listeners (TURN-UDP and
	// TURN-DTLS, bound and public). A peer on one of these ports at an
	// address of Addrs, loopback or unspecified is refused whatever the clusters say: a relay would
	// otherwise send from ternd to ternd's own listener. Relays are UDP, so
	// stream listeners' ports cannot be reached from one and are not
	// listed.
	Ports []uint16
}

// SelfOf returns the Self of a config's listeners and the relay addresses
// relay (bind and public). A listener that binds a wildcard address is
// reachable at every address of the host, so the host's interface
// addresses (net.InterfaceAddrs) are added then; an error listing them
// adds none.
func SelfOf(listeners []config.Listener, relay []netip.Addr) Self {
	var s Self
	wildcard := false
	for _, l := range listeners {
		for _, str := range []string{l.Address, l.PublicAddress} {
			if a, err := netip.ParseAddr(str); err == nil {
				if a.IsUnspecified() {
					wildcard = true
				} else {
					s.Addrs = append(s.Addrs, a)
				}
			}
		}
		if l.Protocol.Transport() == protocol.TransportUDP {
			for _, p := range []int{l.Port, l.PublicPort} {
				if p > 0 && p <= 0xFFFF && !slices.Contains(s.Ports, uint16(p)) {
					s.Ports = append(s.Ports, uint16(p))
				}
			}
		}
	}
	s.Addrs = append(s.Addrs, relay...)
	if wildcard {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range addrs {
				if pf, err := netip.ParsePrefix(ia.String()); err == nil {
					s.Addrs = append(s.Addrs, pf.Addr().WithZone(""))
				}
			}
		}
	}
	return s
}

// New compiles the allowlist of routes (cluster names) against clusters.
// self is the dataplane itself (see Self). It returns an error naming an
// unknown route or a bad endpoint. STRICT_DNS clusters allow nothing here,
// and every peer is in cluster 0: see Build.
func New(routes []string, clusters []config.Cluster, self Self) (*List, error) {
	return Build(routes, clusters, self, nil, nil)
}

// Build is New with the addresses of STRICT_DNS clusters' host names taken
// from lookup (Resolver.Lookup), and each cluster numbered by ids (Cluster
// reports the number). A nil lookup resolves nothing; a nil ids numbers
// every cluster 0. A resolved address never opens a protected range: DNS
// answers are not an explicit choice of the config, and a name that
// resolves to loopback or to the metadata address must not reach it.
func Build(routes []string, clusters []config.Cluster, self Self, lookup func(host string) []netip.Addr, ids *ClusterIDs) (*List, error) {
	p := &List{protected: append([]netip.Prefix(nil), defaultProtected...), selfPorts: slices.Clone(self.Ports)}
	for _, a := range self.Addrs {
		a = a.Unmap()
		if a.IsValid() && !a.IsUnspecified() {
			p.protected = append(p.protected, netip.PrefixFrom(a, a.BitLen()))
			p.self = append(p.self, a)
		}
	}
	byName := make(map[string]config.Cluster, len(clusters))
	for _, c := range clusters {
		byName[c.Name] = c
	}
	for _, name := range routes {
		c, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("route %q names no cluster", name)
		}
		id := ids.ID(name)
		if c.IsStrictDNS() {
			if lookup == nil {
				continue
			}
			for _, host := range c.Endpoints {
				for _, a := range lookup(host) {
					a = a.Unmap()
					// sensitive stays false: see above.
					p.rules = append(p.rules, rule{prefix: netip.PrefixFrom(a, a.BitLen()), minPort: uint16(c.MinPort), maxPort: uint16(c.MaxPort), cluster: id})
				}
			}
			continue
		}
		prefixes, err := c.Prefixes()
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", name, err)
		}
		for _, pf := range prefixes {
			r := rule{prefix: pf, minPort: uint16(c.MinPort), maxPort: uint16(c.MaxPort), cluster: id}
			for _, pr := range p.protected {
				if pr.Bits() <= pf.Bits() && pr.Contains(pf.Addr()) {
					r.sensitive = true
					break
				}
			}
			p.rules = append(p.rules, r)
		}
	}
	return p, nil
}

// Allowed reports whether peer may be reached. Port 0 asks whether any port
// of the peer's IP is allowed (permissions are per IP, RFC 8656 §9).
func (p *List) Allowed(peer netip.AddrPort) bool {
	_, ok := p.Cluster(peer)
	return ok
}

// Cluster reports whether peer may be reached, as Allowed, and the number
// (Build's ids) of the cluster that admits it: the first of the routes, in
// their order, whose endpoints hold the peer. It does not allocate.
func (p *List) Cluster(peer netip.AddrPort) (uint32, bool) {
	ip := peer.Addr().Unmap()
	port := peer.Port()
	if p.isSelf(ip, port) {
		return 0, false
	}
	protected := p.isProtected(ip)
	if !protected && ip.Is6() {
		// An IPv6 form of a protected IPv4 address (NAT64, 6to4, Teredo,
		// IPv4-compatible) reaches that address through a translator or
		// a tunnel. No rule opens it: only a prefix inside a protected
		// range is sensitive, and these prefixes are not.
		forms, n := embedded(ip)
		for i := range n {
			if p.isProtected(forms[i]) {
				protected = true
				break
			}
		}
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.prefix.Contains(ip) {
			continue
		}
		if protected && !r.sensitive {
			// A wide prefix such as 0.0.0.0/0 does not open loopback, the
			// metadata address or the dataplane itself.
			continue
		}
		if r.maxPort == 0 || port == 0 || (port >= r.minPort && port <= r.maxPort) {
			return r.cluster, true
		}
	}
	return 0, false
}

func (p *List) isProtected(ip netip.Addr) bool {
	for _, pr := range p.protected {
		if pr.Contains(ip) {
			return true
		}
	}
	return false
}

// isSelf reports whether ip:port is one of the dataplane's own UDP
// listeners (see Self.Ports). Port 0 (a permission, which is per IP) is
// never refused here: the Send indications and channel bindings to the IP
// name a port and are checked then. IPv6 forms of the dataplane's IPv4
// addresses need no check here: they are protected, and no rule opens
// them (see Cluster).
func (p *List) isSelf(ip netip.Addr, port uint16) bool {
	return port != 0 && slices.Contains(p.selfPorts, port) && p.selfHost(ip)
}

// selfHost reports whether ip is an address of the dataplane's host.
func (p *List) selfHost(ip netip.Addr) bool {
	return ip.IsLoopback() || ip.IsUnspecified() || (ip.Is4() && ip.As4()[0] == 0) || slices.Contains(p.self, ip)
}
