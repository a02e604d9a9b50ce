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
