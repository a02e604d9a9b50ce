package launch

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// terndConfig is a dataplane config (dataplane/config) equivalent to the
// coturn and pion setups: one TURN-UDP listener, static credentials, loopback
// peers allowed, the wide relay range on the server's own relay address.
// Without metrics it serves no /metrics endpoint.
func (l *Launcher) terndConfig(listen netip.AddrPort, relay netip.Addr, metrics bool) string {
	metricsAddr := ""
	if metrics {
		metricsAddr = fmt.Sprintf("127.0.0.1:%d", listen.Port()+1)
	}
	return fmt.Sprintf(`version: v1
admin:
  name: ternbench
  logLevel: warn
  metricsAddress: "%s"
  healthAddress: 127.0.0.1:%d
auth:
  type: static
  realm: %s
  username: %s
  password: %s
listeners:
  - name: udp
    protocol: TURN-UDP
    address: %s
    port: %d
    routes: [loopback]
clusters:
  - name: loopback
    endpoints: ["127.0.0.0/8"]
relay:
  address: %s
  minPort: %d
  maxPort: %d
limits:
  # The load generator's thousands of clients share one address, and the
  # peers have no per-IP quota.
  allocationsPerIP: -1
`, metricsAddr, listen.Port()+2, Realm, User, Pass, listen.Addr(), listen.Port(), relay, l.MinPort, l.MaxPort)
}

// coturnArgs is coturn's command line: no config file, UDP only, the same
// credentials, realm, relay range and two relay threads as the others,
// loopback peers allowed. coturn has no flag for socket buffer sizes; it
// sizes its sockets itself.
func (l *Launcher) coturnArgs(listen netip.AddrPort, relay netip.Addr) []string {
	return []string{l.Turnserver, "-n",
		"--listening-ip=" + listen.Addr().String(), "--relay-ip=" + relay.String(),
		"-p", fmt.Sprint(listen.Port()),
		"--min-port", fmt.Sprint(l.MinPort), "--max-port", fmt.Sprint(l.MaxPort),
		"--lt-cred-mech", "--user", User + ":" + Pass, "--realm", Realm,
		"--allow-loopback-peers", "--no-cli", "--no-tls", "--no-dtls", "--no-tcp-relay",
		"--relay-threads", fmt.Sprint(l.Threads),
		"--pidfile", filepath.Join(l.Dir, "coturn.pid"),
		// Its own (empty) user database, not the system's /var/lib/turn.
		"--db", filepath.Join(l.Dir, "coturn.db"),
		"--log-file", "stdout", "--simple-log",
	}
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " '\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
