// Package alternates turns a dataplane config's alternates ("host:port"
// entries, validated by dataplane/config) into the TURN engine's redirect
// targets (turn.Settings.Alternates: the addresses a 300 Try Alternate's
// ALTERNATE-SERVER names, RFC 8489 §10 and §14.15), resolving names when
// the config is loaded and leaving out this dataplane's own addresses.
package alternates

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
)

// LookupTimeout bounds the resolution of one alternate's name.
const LookupTimeout = 2 * time.Second

// LookupNetIP resolves a host name to its addresses
// (net.Resolver.LookupNetIP).
type LookupNetIP func(ctx context.Context, network, host string) ([]netip.Addr, error)

// Resolve turns the config's alternates ("host:port", validated)
// into the engine's redirect targets: an IP entry as it is, a name as each
// address it resolves to now (when the config is loaded or reloaded; a
// name that does not resolve is logged and left out, since a redirect
// target is an aid, not a reason to refuse the config). ALTERNATE-SERVER
// carries only an address, and no ALTERNATE-DOMAIN (RFC 8489 §14.16) is
// sent: a TLS or DTLS client then checks the alternate's certificate
// against the name it first dialled (§10), which is what replicas of one
// Gateway, sharing its certificate, present.
//
// Entries that are this dataplane itself are dropped (RFC 8489 §10's loop
// rule on the server's side): an address:port equal to a listener's
// address and port or its public address and port (the listener's port
// when publicPort is 0), for a wildcard listener each of the dataplane's
// own IPs (relay and public addresses) with the listener's port, and a
// port-0 entry on any of those IPs.
// So one list may name every replica of a Gateway, this one included.
func Resolve(cfg *config.Config, lookup LookupNetIP, log *slog.Logger) []netip.AddrPort {
	if len(cfg.Alternates) == 0 {
		return nil
	}
	selfAddrs, selfIPs := selfAddresses(cfg)
	var out []netip.AddrPort
	seen := map[netip.AddrPort]bool{}
	for _, a := range cfg.Alternates {
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			continue // Validate reports it
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			continue
		}
		ips := []netip.Addr(nil)
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = append(ips, ip)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), LookupTimeout)
			ips, err = lookup(ctx, "ip", host)
			cancel()
			if err != nil || len(ips) == 0 {
				log.Warn("alternate not resolved; left out of redirects", "alternate", a, "error", err)
				continue
			}
		}
		for _, ip := range ips {
			ap := netip.AddrPortFrom(ip.Unmap(), uint16(port))
			if selfAddrs[ap] || (port == 0 && selfIPs[ap.Addr()]) {
				log.Debug("alternate is this dataplane; not offered", "alternate", a)
				continue
			}
			if !seen[ap] {
				seen[ap] = true
				out = append(out, ap)
			}
		}
	}
	return out
}

// selfAddresses returns the transport addresses clients reach this
// dataplane's listeners at, and their IPs. A listener bound to a wildcard
// address (what tern-operator renders) is reached at this dataplane's own
// IPs, which the config names as the relay addresses (the pod's or node's
// IP) and the public addresses, on the listener's port.
func selfAddresses(cfg *config.Config) (map[netip.AddrPort]bool, map[netip.Addr]bool) {
	addrs, ips := map[netip.AddrPort]bool{}, map[netip.Addr]bool{}
	parse := func(s string) (netip.Addr, bool) {
		ip, err := netip.ParseAddr(s)
		return ip.Unmap(), err == nil
	}
	add := func(ip netip.Addr, port int) {
		if port <= 0 || port > 65535 {
			return
		}
		addrs[netip.AddrPortFrom(ip, uint16(port))] = true
		ips[ip] = true
	}
	var own []netip.Addr
	for _, s := range []string{cfg.Relay.Address, cfg.Relay.PublicAddress} {
		if ip, ok := parse(s); ok && !ip.IsUnspecified() {
			own = append(own, ip)
		}
	}
	for _, ra := range cfg.Relay.ExtraAddresses {
		for _, s := range []string{ra.Address, ra.PublicAddress} {
			if ip, ok := parse(s); ok && !ip.IsUnspecified() {
				own = append(own, ip)
			}
		}
	}
	for _, l := range cfg.Listeners {
		if ip, ok := parse(l.PublicAddress); ok {
			own = append(own, ip)
		}
	}
	for _, l := range cfg.Listeners {
		ip, ok := parse(l.Address)
		switch {
		case !ok:
			continue
		case ip.IsUnspecified():
			for _, o := range own {
				add(o, l.Port)
			}
		default:
			add(ip, l.Port)
		}
		if pub, ok := parse(l.PublicAddress); ok {
			port := l.PublicPort
			if port == 0 {
				port = l.Port
			}
			add(pub, port)
		}
	}
	return addrs, ips
}
