package soak

import (
	"fmt"
	"net/netip"
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
func TerndConfig(listen netip.AddrPort, relay, peer netip.Addr) string {
	return fmt.Sprintf(`version: v1
admin:
  name: ternbench-soak
  logLevel: info
  metricsAddress: 127.0.0.1:%d
  healthAddress: 127.0.0.1:%d
auth:
  type: static
  realm: %s
  username: %s
  password: %s
listeners:
  - {name: udp, protocol: TURN-UDP, address: %s, port: %d, routes: [local]}
  - {name: tcp, protocol: TURN-TCP, address: %s, port: %d, routes: [local]}
clusters:
  - name: local
    endpoints: ["%s/32"]
relay:
  address: %s
  minPort: 20000
  maxPort: 29999
limits:
  maxLifetime: 600
`, listen.Port()+1, listen.Port()+2, Realm, User, Pass,
		listen.Addr(), listen.Port(), listen.Addr(), listen.Port(), peer, relay)
}

// MetricsURL is the /metrics address of a ternd running TerndConfig(listen, ...).
func MetricsURL(listen netip.AddrPort) string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", listen.Port()+1)
}
