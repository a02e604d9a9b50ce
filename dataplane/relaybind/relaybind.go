// Package relaybind decides which addresses the relay sockets bind: the
// config's relay.address (and each extra address), or its publicAddress
// where that is an address of this host. It takes a config.Relay and
// returns one with the addresses to bind; dataplane/relay binds them.
package relaybind

import (
	"log/slog"
	"net"
	"net/netip"

	"github.com/tern-gw/tern/dataplane/config"
)

// Addresses returns the relay config whose addresses the relay
// sockets bind: r, except that an address whose publicAddress is an
// address of this host binds its publicAddress instead. A peer's packet to
// the advertised address (XOR-RELAYED-ADDRESS) then reaches the socket, and
// the answer leaves from it. That is the case of a hostNetwork dataplane on
// a node whose ExternalIP sits on one of its own interfaces (DigitalOcean's
// public interface, bare metal with two networks): bound to the InternalIP,
// the socket would never see what peers send. Where the ExternalIP is not
// the host's (a provider's 1:1 NAT in front of the InternalIP: AWS, GCP,
// Azure), the NAT delivers to the InternalIP, and relay.address stays.
//
// Whether an address is this host's is asked of the kernel, by binding a
// UDP socket to it for a moment: that honours the local routing table
// (127.0.0.0/8 is all local, as is an address on any interface).
func Addresses(r config.Relay, log *slog.Logger) config.Relay {
	local := func(addr, public string) bool {
		if public == "" || public == addr {
			return false
		}
		a, err := netip.ParseAddr(public)
		if err != nil {
			return false
		}
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	out := r
	if local(r.Address, r.PublicAddress) {
		log.Info("relay: the public address is this host's; relay sockets bind it", "address", r.Address, "publicAddress", r.PublicAddress)
		out.Address = r.PublicAddress
	}
	if len(r.ExtraAddresses) > 0 {
		out.ExtraAddresses = append([]config.RelayAddress(nil), r.ExtraAddresses...)
		for i, ra := range out.ExtraAddresses {
			if local(ra.Address, ra.PublicAddress) {
				log.Info("relay: the public address is this host's; relay sockets bind it", "address", ra.Address, "publicAddress", ra.PublicAddress)
				out.ExtraAddresses[i].Address = ra.PublicAddress
			}
		}
	}
	return out
}
