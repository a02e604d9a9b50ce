package soak

import (
	"fmt"
	"net/netip"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// Credentials and realm of TerndConfig.
const (
	User  = "user"
	Pass  = "pass"
	Realm = "stunner.l7mp.io"
)

// TerndConfig is the dataplane config a soak runs ternd with: the README's
// (deploy/examples/local.yaml: static credentials, one loopback peer, relay ports
// 20000-29999) plus a TURN-TCP listener on the TURN-UDP listener's port for the idle
// connections. Every limit is left at its default; that is what the soak is about. Metrics
// are on 127.0.0.1 at listen's port + 1 (MetricsURL), health at + 2.
func TerndConfig(listen netip.AddrPort, relay, peer netip.Addr) *config.Config {
	loopback := netip.MustParseAddr("127.0.0.1")
	listener := func(name string, p protocol.Protocol) config.Listener {
		return config.Listener{Name: name, Protocol: p, Address: listen.Addr().String(), Port: int(listen.Port()), Routes: []string{"local"}}
	}
	return &config.Config{
		Version: config.Version,
		Admin: config.Admin{Name: "ternbench-soak", LogLevel: "info",
			MetricsAddress: netip.AddrPortFrom(loopback, listen.Port()+1).String(),
			HealthAddress:  netip.AddrPortFrom(loopback, listen.Port()+2).String()},
		Auth:      config.Auth{Type: config.AuthStatic, Realm: Realm, Username: User, Password: Pass},
		Listeners: []config.Listener{listener("udp", protocol.TURNUDP), listener("tcp", protocol.TURNTCP)},
		Clusters:  []config.Cluster{{Name: "local", Endpoints: []string{netip.PrefixFrom(peer, peer.BitLen()).String()}}},
		Relay:     config.Relay{Address: relay.String(), MinPort: 20000, MaxPort: 29999},
		Limits:    config.Limits{MaxLifetime: 600},
	}
}

// MetricsURL is the /metrics address of a ternd running TerndConfig(listen, ...).
func MetricsURL(listen netip.AddrPort) string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", listen.Port()+1)
}

// Ports of HardenedConfig's listeners, above the TURN-UDP and TURN-TCP port (metrics and
// health take + 1 and + 2).
const (
	tlsPortOffset  = 5 // TURN-TLS and TURN-DTLS
	widePortOffset = 6 // the wide TURN-UDP listener
)

// HardenedConfig is TerndConfig plus what the hardening attacks need: TURN-TLS and
// TURN-DTLS listeners at listen's port + 5 with the certificate and key at certFile and
// keyFile, and a TURN-UDP listener at + 6 routed to a cluster of 0.0.0.0/0, ::/0 and
// 127.0.0.0/8 (the wide cluster of issue 22's items 6 and 9), with ::1 as a second relay
// address so that IPv6 peers can be asked for. Limits stay at their defaults.
func HardenedConfig(listen netip.AddrPort, relay, peer netip.Addr, certFile, keyFile string) *config.Config {
	c := TerndConfig(listen, relay, peer)
	tls := int(listen.Port()) + tlsPortOffset
	for _, l := range []config.Listener{
		{Name: "tls", Protocol: protocol.TURNTLS, Port: tls, Cert: certFile, Key: keyFile, Routes: []string{"local"}},
		{Name: "dtls", Protocol: protocol.TURNDTLS, Port: tls, Cert: certFile, Key: keyFile, Routes: []string{"local"}},
		{Name: "wide", Protocol: protocol.TURNUDP, Port: int(listen.Port()) + widePortOffset, Routes: []string{"wide"}},
	} {
		l.Address = listen.Addr().String()
		c.Listeners = append(c.Listeners, l)
	}
	c.Clusters = append(c.Clusters, config.Cluster{Name: "wide", Endpoints: []string{"0.0.0.0/0", "::/0", "127.0.0.0/8"}})
	c.Relay.ExtraAddresses = []config.RelayAddress{{Address: "::1"}}
	return c
}

// Hardened fills cfg's addresses of the listeners of a ternd running HardenedConfig(listen, ...).
func Hardened(cfg *Config, listen netip.AddrPort) {
	at := func(off int) netip.AddrPort { return netip.AddrPortFrom(listen.Addr(), listen.Port()+uint16(off)) }
	cfg.TLSServer, cfg.DTLSServer, cfg.WideServer = at(tlsPortOffset), at(tlsPortOffset), at(widePortOffset)
	cfg.HealthAddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), listen.Port()+2)
	cfg.OwnUDP = []netip.AddrPort{listen, at(tlsPortOffset), at(widePortOffset)}
}
