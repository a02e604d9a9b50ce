// Package launch starts the servers ternbench compares — ternd, coturn,
// pion/turn and the raw forwarder — on loopback with comparable settings,
// and stops them again. It stops only the processes it started, by PID.
package launch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/netns"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/selfsigned"
)

// Names are the servers compared ("-launch all"), in the order results list them.
var Names = []string{"ternd", "coturn", "pion", "forwarder"}

// Extra are the other targets a Launcher can start: ternd-nometrics is
// ternd with its metrics off (no /metrics endpoint, --packet-counters=false),
// measured beside ternd to show what counting costs on the relay path.
//
// ternd-offload is ternd with its eBPF ChannelData fast path
// (--offload-engine OffloadEngine, default TC; issue 15), for runs inside
// network namespaces where forwarding is on (bench/netns): on the host it
// would pass every packet to its sockets.
//
// ternd-443 is ternd whose TURN-TLS listener shares its port with HTTPS
// (issue 23): it reads each ClientHello first, serves TURN-TLS (ALPN
// "stun.turn", the SNI TURN443Name, or neither ALPN nor SNI, as the
// harness's clients send) and splices every other connection to
// TLSUpstream. It needs Streams.
var Extra = []string{"ternd-nometrics", "ternd-offload", "ternd-443"}

// TURN443Name is the SNI ternd-443 serves as TURN-TLS whatever the ALPN.
const TURN443Name = "turn.ternbench.test"

// Launcher starts bench servers. Every server listens on 127.0.0.1 at
// BasePort + 100·i (i its index in Names, then Extra) and relays from an
// address of its own (127.0.0.2, .3, ...), so their wide relay port ranges
// never meet.
type Launcher struct {
	// Dir receives configs and logs.
	Dir string
	// Ternd is the ternd binary.
	Ternd string
	// Self is the ternbench binary, run as "serve-pion" and
	// "serve-forwarder".
	Self string
	// Turnserver is coturn's binary; default "turnserver" from PATH.
	Turnserver string
	// Threads is listener sockets (or coturn relay threads) per server;
	// default 2, the cores of the reference machine.
	Threads int
	// BasePort is ternd's TURN port; the others follow. Default 23478,
	// away from 3478 so a developer's own ternd does not collide.
	BasePort int
	// MinPort and MaxPort are every server's relay range; default
	// 4000-65535, room for ~60k allocations on one relay address.
	MinPort, MaxPort int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF where a server has a knob for
	// it, bytes; default 4 MiB (coturn's CLI has none).
	SocketBuffer int
	// RelayIP is the relay address of the first server (Names order);
	// the others take the next ones. Default 127.0.0.2.
	RelayIP netip.Addr
	// Streams makes the TURN servers also listen on TURN-TCP (the UDP
	// port), TURN-TLS and TURN-DTLS (both the UDP port + TLSPortOffset),
	// with a self-signed certificate written to Dir/cert; the relay leg
	// stays UDP. The forwarder stays UDP only.
	Streams bool
	// Netns is the network namespace the servers run in ("ip netns exec";
	// "" this one), ClientNS where readiness probes are sent from.
	Netns, ClientNS string
	// ListenIP is every server's client-facing address; default 127.0.0.1.
	ListenIP netip.Addr
	// PeerNet is a peer prefix ternd's cluster and pion allow besides
	// 127.0.0.0/8 (the veth topology's peers); coturn allows any peer.
	PeerNet netip.Prefix
	// CPUs pins every server to these CPUs ("taskset -c CPUs"; "" none).
	CPUs string
	// OffloadEngine is ternd-offload's --offload-engine; default TC.
	OffloadEngine string
	// TLSUpstream is ternd-443's upstream, host:port: where its TURN-TLS
	// listener splices the connections that are not TURN. Default
	// 127.0.0.1:1, where nothing listens: such connections then fail, which
	// a run of TURN clients alone never makes.
	TLSUpstream string

	cert, key string
	procs     []*proc
}

// Credentials and realm of every launched server.
const (
	User  = "user"
	Pass  = "pass"
	Realm = "stunner.l7mp.io"
)

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (l *Launcher) defaults() {
	if l.Threads == 0 {
		l.Threads = 2
	}
	if l.BasePort == 0 {
		l.BasePort = 23478
	}
	if l.MinPort == 0 {
		l.MinPort, l.MaxPort = 4000, 65535
	}
	if l.SocketBuffer == 0 {
		l.SocketBuffer = 4 << 20
	}
	if l.Turnserver == "" {
		l.Turnserver = "turnserver"
	}
	if !l.RelayIP.IsValid() {
		l.RelayIP = netip.AddrFrom4([4]byte{127, 0, 0, 2})
	}
	if !l.ListenIP.IsValid() {
		l.ListenIP = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if l.OffloadEngine == "" {
		l.OffloadEngine = "TC"
	}
	if l.TLSUpstream == "" {
		l.TLSUpstream = "127.0.0.1:1"
	}
}

func (l *Launcher) addr(i int) netip.AddrPort {
	return netip.AddrPortFrom(l.ListenIP, uint16(l.BasePort+100*i))
}

// TLSPortOffset is the TURN-TLS and TURN-DTLS port of a server with
// Streams, above its UDP port (ternd's metrics and health take +1 and +2).
const TLSPortOffset = 5

func (l *Launcher) relayIP(i int) netip.Addr {
	b := l.RelayIP.As4()
	b[3] += byte(i)
	return netip.AddrFrom4(b)
}

// streamAddrs fills t's TCP, TLS and DTLS addresses after its UDP one.
func streamAddrs(t *bench.Target) {
	tls := netip.AddrPortFrom(t.Addr.Addr(), t.Addr.Port()+TLSPortOffset)
	t.TCP, t.TLS, t.DTLS = t.Addr, tls, tls
}

// Start launches the named server, waits until it answers, and returns it
// as a target with its PID.
func (l *Launcher) Start(name string) (bench.Target, error) {
	l.defaults()
	all := append(slices.Clone(Names), Extra...)
	i := slices.Index(all, name)
	if i < 0 {
		return bench.Target{}, fmt.Errorf("launch: unknown server %q (want one of %v)", name, all)
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return bench.Target{}, err
	}
	t := bench.Target{Name: name, Kind: bench.KindTURN, Addr: l.addr(i),
		Creds: turnclient.Credentials{Username: User, Password: Pass}}
	// The servers bind with SO_REUSEPORT, so a leftover server on the same
	// port would not make the new one fail: it would silently take half the
	// clients. Refuse instead.
	if l.probe(t) == nil || l.probe(bench.Target{Kind: bench.KindRaw, Addr: t.Addr}) == nil {
		return t, fmt.Errorf("launch %s: something already answers on %v; stop it or pick another -base-port", name, t.Addr)
	}
	if name == "ternd-443" && !l.Streams {
		return t, fmt.Errorf("launch %s: it shares its TURN-TLS port with HTTPS, so it needs the stream listeners (a TLS transport)", name)
	}
	if l.Streams && name != "forwarder" {
		if l.cert == "" {
			var err error
			if l.cert, l.key, err = selfsigned.Write(filepath.Join(l.Dir, "cert"), "ternbench", 24*time.Hour); err != nil {
				return t, err
			}
		}
		streamAddrs(&t)
	}
	var args []string
	switch name {
	case "ternd", "ternd-nometrics", "ternd-offload", "ternd-443":
		metrics := name != "ternd-nometrics"
		cfg := filepath.Join(l.Dir, name+".yaml")
		c := l.terndConfig(t.Addr, l.relayIP(i), metrics)
		if name == "ternd-443" {
			for k := range c.Listeners {
				if c.Listeners[k].Protocol == protocol.TURNTLS {
					c.Listeners[k].Upstream = &config.TLSUpstream{Address: l.TLSUpstream, TURNServerNames: []string{TURN443Name}}
				}
			}
		}
		if err := WriteConfig(cfg, c); err != nil {
			return t, err
		}
		args = []string{l.Ternd, "-c", cfg, "--udp-thread-num", fmt.Sprint(l.Threads),
			"--socket-buffer", fmt.Sprint(l.SocketBuffer)}
		t.Description = fmt.Sprintf("ternd, %d SO_REUSEPORT listener sockets, %d B socket buffers", l.Threads, l.SocketBuffer)
		if !metrics {
			args = append(args, "--packet-counters=false")
			t.Description += ", metrics off (no metricsAddress, `--packet-counters=false`)"
		}
		if name == "ternd-443" {
			t.Description += fmt.Sprintf(", TURN-TLS port shared with HTTPS (upstream %s, TURN server name %s)", l.TLSUpstream, TURN443Name)
		}
		if name == "ternd-offload" {
			args = append(args, "--offload-engine", l.OffloadEngine)
			t.Description += ", eBPF ChannelData fast path `--offload-engine " + l.OffloadEngine + "`"
		} else {
			// ternd's default is Auto, which inside a benchmark namespace
			// (forwarding on) would offload: ternd is the socket path.
			args = append(args, "--offload-engine", "None")
			t.Description += ", socket path (`--offload-engine None`)"
		}
	case "coturn":
		args = l.coturnArgs(t.Addr, l.relayIP(i))
		t.Description = fmt.Sprintf("coturn (Debian) `%s`", strings.ReplaceAll(shellJoin(args[1:]), l.Dir, "$WORK"))
	case "pion":
		args = []string{l.Self, "serve-pion", "-listen", t.Addr.String(), "-relay-ip", l.relayIP(i).String(),
			"-min-port", fmt.Sprint(l.MinPort), "-max-port", fmt.Sprint(l.MaxPort),
			"-threads", fmt.Sprint(l.Threads), "-realm", Realm, "-user", User, "-pass", Pass,
			"-socket-buffer", fmt.Sprint(l.SocketBuffer)}
		if l.PeerNet.IsValid() {
			args = append(args, "-peer-net", l.PeerNet.String())
		}
		if l.Streams {
			args = append(args, "-tcp", t.TCP.String(), "-tls", t.TLS.String(), "-dtls", t.DTLS.String(),
				"-cert", l.cert, "-key", l.key)
		}
		t.Description = fmt.Sprintf("pion/turn v4.1.4 server (bench/pionserver), %d SO_REUSEPORT listeners", l.Threads)
	case "forwarder":
		t.Kind = bench.KindRaw
		args = []string{l.Self, "serve-forwarder", "-listen", t.Addr.String(), "-relay-ip", l.relayIP(i).String(),
			"-threads", fmt.Sprint(l.Threads), "-socket-buffer", fmt.Sprint(l.SocketBuffer)}
		t.Description = fmt.Sprintf("raw recvmmsg/sendmmsg UDP forwarder (bench/forwarder), no TURN, %d listeners", l.Threads)
	}
	if t.TLS.IsValid() && name != "coturn" { // coturn's flags say it already
		t.Description += fmt.Sprintf("; TURN-TCP on %d, TURN-TLS and TURN-DTLS on %d (self-signed ECDSA P-256)", t.TCP.Port(), t.TLS.Port())
	}
	p, err := l.spawn(name, args)
	if err != nil {
		return t, err
	}
	t.PID = p.cmd.Process.Pid
	if err := l.waitReady(t, p.done, 10*time.Second); err != nil {
		l.stop(p)
		return t, fmt.Errorf("launch %s: %w (log: %s)", name, err, l.logPath(name))
	}
	return t, nil
}

// MetricsURL is the /metrics address of a launched ternd target (its TURN
// port + 1 on 127.0.0.1 in the servers' namespace, Netns).
func (l *Launcher) MetricsURL(t bench.Target) string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", t.Addr.Port()+1)
}

// StartTernd launches ternd with c, a dataplane config written to
// Dir/<name>.yaml by WriteConfig, and extra flags, waits until it answers a Binding request at addr (a
// TURN-UDP listener of the config), and returns it as a target named name with its PID. It
// is for runs that need a config of their own (ternbench soak keeps every limit at its
// default); Start's configs are the comparison's.
func (l *Launcher) StartTernd(name string, c *config.Config, addr netip.AddrPort, flags ...string) (bench.Target, error) {
	l.defaults()
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return bench.Target{}, err
	}
	t := bench.Target{Name: name, Kind: bench.KindTURN, Addr: addr,
		Creds: turnclient.Credentials{Username: User, Password: Pass}}
	if l.probe(t) == nil {
		return t, fmt.Errorf("launch %s: something already answers on %v", name, addr)
	}
	cfg := filepath.Join(l.Dir, name+".yaml")
	if err := WriteConfig(cfg, c); err != nil {
		return t, err
	}
	p, err := l.spawn(name, append([]string{l.Ternd, "-c", cfg}, flags...))
	if err != nil {
		return t, err
	}
	t.PID = p.cmd.Process.Pid
	if err := l.waitReady(t, p.done, 10*time.Second); err != nil {
		l.stop(p)
		return t, fmt.Errorf("launch %s: %w (log: %s)", name, err, l.logPath(name))
	}
	return t, nil
}

func (l *Launcher) logPath(name string) string { return filepath.Join(l.Dir, name+".log") }

func (l *Launcher) spawn(name string, args []string) (*proc, error) {
	logf, err := os.Create(l.logPath(name))
	if err != nil {
		return nil, err
	}
	if l.CPUs != "" {
		args = append([]string{"taskset", "-c", l.CPUs}, args...)
	}
	args = append(netns.Exec(l.Netns), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	l.procs = append(l.procs, p)
	return p, nil
}

// Stop stops every server this launcher started: SIGTERM to its PID, then
// SIGKILL to the same PID if it has not exited within 5 s.
func (l *Launcher) Stop() {
	for _, p := range l.procs {
		l.stop(p)
	}
	l.procs = nil
}

func (l *Launcher) stop(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitReady polls the server with the request a client would start with
// until it answers: a Binding request for TURN servers, a bind for the
// forwarder.
func (l *Launcher) waitReady(t bench.Target, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("exited during startup")
		default:
		}
		if l.probe(t) == nil && l.streamsListening(t) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer on %v within %v", t.Addr, timeout)
}

// streamsListening reports whether t's TURN-TCP and TURN-TLS ports (if it
// has them) accept connections, so that a step does not race a server
// that opens its stream listeners after its UDP one.
func (l *Launcher) streamsListening(t bench.Target) bool {
	for _, a := range []netip.AddrPort{t.TCP, t.TLS} {
		if !a.IsValid() {
			continue
		}
		var c net.Conn
		err := netns.Do(l.ClientNS, func() (err error) {
			c, err = net.DialTimeout("tcp", a.String(), time.Second)
			return err
		})
		if err != nil {
			return false
		}
		c.Close()
	}
	return true
}
