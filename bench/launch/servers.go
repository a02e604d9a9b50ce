package launch

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// terndConfig is a dataplane config equivalent to the coturn and pion
// setups: one TURN-UDP listener, static credentials, loopback peers allowed,
// the wide relay range on the server's own relay address. Without metrics it
// serves no /metrics endpoint. The load generator's thousands of clients
// share one address, and the peers have no per-IP quota, so
// allocationsPerIP is off.
func (l *Launcher) terndConfig(listen netip.AddrPort, relay netip.Addr, metrics bool) *config.Config {
	c := &config.Config{
		Version: config.Version,
		Admin: config.Admin{Name: "ternbench", LogLevel: "warn",
			HealthAddress: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), listen.Port()+2).String()},
		Auth: config.Auth{Type: config.AuthStatic, Realm: Realm, Username: User, Password: Pass},
		Listeners: []config.Listener{
			l.listener("udp", protocol.TURNUDP, listen.Addr(), listen.Port()),
		},
		Clusters: []config.Cluster{{Name: "loopback", Endpoints: l.peerEndpoints()}},
		Relay:    config.Relay{Address: relay.String(), MinPort: l.MinPort, MaxPort: l.MaxPort},
		Limits:   config.Limits{AllocationsPerIP: config.NoLimit},
	}
	if metrics {
		c.Admin.MetricsAddress = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), listen.Port()+1).String()
	}
	if l.Streams {
		// TURN-TCP on the TURN-UDP port; TURN-TLS and TURN-DTLS on the TLS port.
		tls := listen.Port() + TLSPortOffset
		c.Listeners = append(c.Listeners,
			l.listener("tcp", protocol.TURNTCP, listen.Addr(), listen.Port()),
			l.listener("tls", protocol.TURNTLS, listen.Addr(), tls),
			l.listener("dtls", protocol.TURNDTLS, listen.Addr(), tls))
	}
	return c
}

// listener is a ternd listener routed to the loopback cluster, with the
// launcher's certificate when proto is secure.
func (l *Launcher) listener(name string, proto protocol.Protocol, addr netip.Addr, port uint16) config.Listener {
	ls := config.Listener{Name: name, Protocol: proto, Address: addr.String(), Port: int(port), Routes: []string{"loopback"}}
	if proto.Secure() {
		ls.Cert, ls.Key = l.cert, l.key
	}
	return ls
}

// peerEndpoints is the peer cluster's endpoint list: loopback, and PeerNet
// where set.
func (l *Launcher) peerEndpoints() []string {
	if l.PeerNet.IsValid() {
		return []string{"127.0.0.0/8", l.PeerNet.String()}
	}
	return []string{"127.0.0.0/8"}
}

// WriteConfig marshals c to path as JSON (which ternd reads as YAML), after
// checking that config.Parse takes it, so that a schema change fails here
// rather than when ternd starts mid-benchmark.
func WriteConfig(path string, c *config.Config) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if _, err := config.Parse(data, nil); err != nil {
		return fmt.Errorf("ternd config %s: %w", path, err)
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
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
