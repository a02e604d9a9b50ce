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
%sclusters:
  - name: loopback
    endpoints: [%s]
relay:
  address: %s
  minPort: %d
  maxPort: %d
limits:
  # The load generator's thousands of clients share one address, and the
  # peers have no per-IP quota.
  allocationsPerIP: -1
`, metricsAddr, listen.Port()+2, Realm, User, Pass, listen.Addr(), listen.Port(), l.streamListeners(listen), l.peerEndpoints(), relay, l.MinPort, l.MaxPort)
}

// peerEndpoints is the peer cluster's endpoint list: loopback, and PeerNet
// where set.
func (l *Launcher) peerEndpoints() string {
	if l.PeerNet.IsValid() {
		return fmt.Sprintf("%q, %q", "127.0.0.0/8", l.PeerNet.String())
	}
	return `"127.0.0.0/8"`
}

// streamListeners is the TURN-TCP, TURN-TLS and TURN-DTLS listeners of a
// ternd config with Streams, or nothing.
func (l *Launcher) streamListeners(listen netip.AddrPort) string {
	if !l.Streams {
		return ""
	}
	tls := listen.Port() + TLSPortOffset
	return fmt.Sprintf(`  - name: tcp
    protocol: TURN-TCP
    address: %[1]s
    port: %[2]d
    routes: [loopback]
  - name: tls
    protocol: TURN-TLS
    address: %[1]s
    port: %[3]d
    cert: %[4]s
    key: %[5]s
    routes: [loopback]
  - name: dtls
    protocol: TURN-DTLS
    address: %[1]s
    port: %[3]d
    cert: %[4]s
    key: %[5]s
    routes: [loopback]
`, listen.Addr(), listen.Port(), tls, l.cert, l.key)
}

// coturnArgs is coturn's command line: no config file, UDP only, the same
// credentials, realm, relay range and two relay threads as the others,
// loopback peers allowed. coturn has no flag for socket buffer sizes; it
// sizes its sockets itself.
func (l *Launcher) coturnArgs(listen netip.AddrPort, relay netip.Addr) []string {
	args := []string{l.Turnserver, "-n",
		"--listening-ip=" + listen.Addr().String(), "--relay-ip=" + relay.String(),
		"-p", fmt.Sprint(listen.Port()),
		"--min-port", fmt.Sprint(l.MinPort), "--max-port", fmt.Sprint(l.MaxPort),
		"--lt-cred-mech", "--user", User + ":" + Pass, "--realm", Realm,
		"--allow-loopback-peers", "--no-cli", "--no-tcp-relay",
		"--relay-threads", fmt.Sprint(l.Threads),
		"--pidfile", filepath.Join(l.Dir, "coturn.pid"),
		// Its own (empty) user database, not the system's /var/lib/turn.
		"--db", filepath.Join(l.Dir, "coturn.db"),
		"--log-file", "stdout", "--simple-log",
	}
	if l.Streams {
		// TURN-TCP on the listening port (coturn's default), TURN-TLS and
		// TURN-DTLS on the TLS port; relaying stays UDP (--no-tcp-relay).
		args = append(args, "--tls-listening-port", fmt.Sprint(listen.Port()+TLSPortOffset),
			"--cert", l.cert, "--pkey", l.key)
	} else {
		args = append(args, "--no-tls", "--no-dtls")
	}
	return args
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
