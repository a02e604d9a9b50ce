// Package allowlist compiles a listener's routes into the set of peers its
// clients may reach through a relay, and answers that question on the
// packet path without allocating. See docs/security.md.
package allowlist

import (
	"fmt"
	"net/netip"

	"github.com/tern-gw/tern/dataplane/config"
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
// opens. It is immutable; a config change builds a new one and swaps it in.
type List struct {
	rules     []rule
	protected []netip.Prefix
}

// defaultProtected are ranges a peer may be in only when a cluster names them
// explicitly (a prefix inside the range, not a wider one that covers it):
// loopback, link-local (which holds the cloud metadata address
// 169.254.169.254), unspecified and multicast.
var defaultProtected = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("ff00::/8"),
}

// New compiles the allowlist of routes (cluster names) against clusters.
// own are the dataplane's own addresses (listeners, relay), which are
// protected like loopback. It returns an error naming an unknown route or a
// bad endpoint. STRICT_DNS clusters allow nothing here, and every peer is
// in cluster 0: see Build.
func New(routes []string, clusters []config.Cluster, own []netip.Addr) (*List, error) {
	return Build(routes, clusters, own, nil, nil)
}

// Build is New with the addresses of STRICT_DNS clusters' host names taken
// from lookup (Resolver.Lookup), and each cluster numbered by ids (Cluster
// reports the number). A nil lookup resolves nothing; a nil ids numbers
// every cluster 0. A resolved address never opens a protected range: DNS
// answers are not an explicit choice of the config, and a name that
// resolves to loopback or to the metadata address must not reach it.
func Build(routes []string, clusters []config.Cluster, own []netip.Addr, lookup func(host string) []netip.Addr, ids *ClusterIDs) (*List, error) {
	p := &List{protected: append([]netip.Prefix(nil), defaultProtected...)}
	for _, a := range own {
		if a.IsValid() && !a.IsUnspecified() {
			p.protected = append(p.protected, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
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
	protected := false
	for _, pr := range p.protected {
		if pr.Contains(ip) {
			protected = true
			break
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
		port := peer.Port()
		if r.maxPort == 0 || port == 0 || (port >= r.minPort && port <= r.maxPort) {
			return r.cluster, true
		}
	}
	return 0, false
}
