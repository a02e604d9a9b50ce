package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
)

// startTakeover starts a second ternd with old's config and --takeover
// (and args), and returns it without waiting for it.
func startTakeover(t *testing.T, old *server, args ...string) *server {
	t.Helper()
	s := &server{cfg: old.cfg, addr: old.addr, healthURL: old.healthURL, metricsURL: old.metricsURL, cfgPath: old.cfgPath}
	cmd := exec.Command(terndBinary(t), append([]string{"-c", old.cfgPath, "-l", old.cfg.Admin.LogLevel, "--takeover"}, args...)...)
	s.start(t, cmd)
	return s
}

// takeoverConfig is the default config with a hand-over socket in the
// test's directory.
func takeoverConfig(t *testing.T) func(*config) {
	dir := t.TempDir()
	return func(c *config) { c.Admin.HandoverSocket = filepath.Join(dir, "run", "ternd.sock") }
}

// flow is one allocation under load: a pion client whose relayed
// conn sends numbered datagrams to an echo peer (by channel, which pion
// binds after its first Send indication) and counts the echoes, and sends
// every tenth datagram as a hand-built Send indication.
type flow struct {
	c        *pionClient
	relay    net.PacketConn
	sent     atomic.Int64
	received atomic.Int64
	// echo is the flow's peer under load, when not load's.
	echo *peer
}

func startFlows(t *testing.T, s *server, echo *peer, n int) []*flow {
	t.Helper()
	flows := make([]*flow, n)
	for i := range flows {
		f := &flow{c: newPionClient(t, s, testUser, testPassword)}
		f.relay = f.c.allocate(t)
		// Lock-step first: the permission and the channel are in place.
		roundTrips(t, f.relay, echo.addr, 3)
		flows[i] = f
	}
	return flows
}

// load sends from every flow every period until stop is closed and counts
// what comes back; wait returns once the readers are done.
func load(flows []*flow, echo *peer, period time.Duration, stop chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	all := echo
	for _, f := range flows {
		echo := all
		if f.echo != nil {
			echo = f.echo
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			var seq uint64
			payload := make([]byte, 120)
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				seq++
				binary.BigEndian.PutUint64(payload, seq)
				var err error
				if seq%10 == 0 {
					m, berr := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
						peerAddress(echo.addr), setterFunc(func(m *stun.Message) error { m.Add(stun.AttrData, payload); return nil }))
					if berr != nil {
						return
					}
					_, err = f.c.WriteTo(m.Raw, f.c.server)
				} else {
					_, err = f.relay.WriteTo(payload, echo.addr)
				}
				if err == nil {
					f.sent.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 1500)
			for {
				_ = f.relay.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, _, err := f.relay.ReadFrom(buf); err != nil {
					select {
					case <-stop:
						return // no echo for 2 s after the senders stopped: the tail is in
					default:
						continue
					}
				}
				f.received.Add(1)
			}
		}()
	}
	return wg.Wait
}

// checkAfterTakeover: every allocation refreshes, binds a channel to a
// new peer and relays both ways on the server now serving.
func checkAfterTakeover(t *testing.T, flows []*flow) {
	t.Helper()
	echo2 := startEchoPeer(t, "127.0.0.1:0")
	for i, f := range flows {
		if m := f.c.transact(t, stun.MethodRefresh, lifetimeAttr(600)); m.Type.Class != stun.ClassSuccessResponse {
			t.Errorf("flow %d: Refresh after the takeover: %v", i, m)
		}
		roundTrips(t, f.relay, echo2.addr, 5)
		f.c.assertQuiet(t)
	}
}

// TestTakeover replaces a loaded ternd by a second one started with
// --takeover: 100 TURN-UDP allocations (channels, and every tenth datagram
// a Send indication) and 10 over TURN-DTLS associations relay both ways,
// 22,000 datagrams/s in all counting both directions. No allocation is
// lost, the old process exits 0, every allocation refreshes, binds and
// relays on the new one, and the loss across the switch is reported (at
// most 0.1%). Each allocation's load goes to an echo peer of its own, so
// that the burst the new process relays when it starts reading what
// waited in its sockets' 4 MiB kernel buffers (100 datagrams per second
// the switch took, per peer) does not overflow a peer's socket buffer
// (the machine's default, about 200 KiB: the test changes no sysctl) even
// when a loaded machine makes the switch take seconds: that loss would be
// the test's, not ternd's.
func TestTakeover(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	mutate, dtlsAddr := takeoverDTLSConfig(t)
	old := startTernd(t, mutate)
	echo := startEchoPeer(t, "127.0.0.1:0")
	const nFlows, nDTLS = 100, 10
	const nPeers = nFlows + nDTLS // one echo peer per allocation
	flows := append(startFlows(t, old, echo, nFlows), startDTLSFlows(t, dtlsAddr(old), echo, nDTLS)...)
	peers := make([]*peer, nPeers)
	for i := range peers {
		peers[i] = startEchoPeer(t, "127.0.0.1:0")
	}
	for i, f := range flows {
		f.echo = peers[i%nPeers]
		roundTrips(t, f.relay, f.echo.addr, 1) // its permission and channel
	}
	old.waitMetric(t, "stunner_allocations_active", nFlows+nDTLS, 10*time.Second)

	stop := make(chan struct{})
	wait := load(flows, echo, 10*time.Millisecond, stop) // 11,000 datagrams/s each way in all
	time.Sleep(time.Second)                              // load before the switch: not an assertion
	old.signalled = true                                 // it exits by itself once handed over
	start := time.Now()
	next := startTakeover(t, old)
	if exited, err := old.waitExit(60 * time.Second); !exited || err != nil {
		t.Fatalf("old ternd after the takeover: exited %v, %v", exited, err)
	}
	switched := time.Since(start)
	testenv.Eventually(t, readyTimeout, func() error {
		if next.exited() {
			t.Fatalf("new ternd exited: %v", next.waitErr)
		}
		return next.ready()
	})
	time.Sleep(time.Second) // load after the switch: not an assertion
	close(stop)
	wait()

	count := func(fs []*flow) (sent, received int64) {
		for _, f := range fs {
			sent += f.sent.Load()
			received += f.received.Load()
		}
		return sent, received
	}
	sent, received := count(flows)
	dSent, dReceived := count(flows[nFlows:])
	loss := float64(sent-received) / float64(sent)
	paused := "?"
	if _, after, ok := strings.Cut(old.out.String(), "handed over to the successor"); ok {
		if _, v, ok := strings.Cut(after, "paused="); ok {
			paused, _, _ = strings.Cut(v, "\n")
		}
	}
	t.Logf("takeover of %d TURN-UDP and %d TURN-DTLS allocations under load: %d datagrams sent, %d echoed back, lost %d, loss %.3f%% (both directions count; DTLS %d sent, %d echoed); the old process stopped reading for %s; new process started to old exited: %v",
		nFlows, nDTLS, sent, received, sent-received, 100*loss, dSent, dReceived, paused, switched)
	if v, _ := next.metric(t, "stunner_allocations_active"); v != nFlows+nDTLS {
		t.Errorf("allocations on the new ternd: %v, want %d", v, nFlows+nDTLS)
	}
	if loss > 0.001 {
		t.Errorf("loss across the switch %.3f%%, want at most 0.1%%", 100*loss)
	}
	checkAfterTakeover(t, flows)
}

// TestTakeoverKilledAtEachStep kills the new process at each step of the
// hand-over before it confirms: the old one serves on (every allocation,
// TURN-UDP and over TURN-DTLS associations, refreshes and relays on it),
// and a last takeover then succeeds.
func TestTakeoverKilledAtEachStep(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	mutate, dtlsAddr := takeoverDTLSConfig(t)
	old := startTernd(t, mutate)
	echo := startEchoPeer(t, "127.0.0.1:0")
	flows := append(startFlows(t, old, echo, 5), startDTLSFlows(t, dtlsAddr(old), echo, 3)...)
	for _, step := range []string{"hello", "received", "imported"} {
		next := startTakeover(t, old, "--takeover-exit-at", step)
		next.signalled = true
		if exited, _ := next.waitExit(60 * time.Second); !exited {
			t.Fatalf("step %s: the new process is still running", step)
		}
		if old.exited() {
			t.Fatalf("step %s: the old process exited: %v", step, old.waitErr)
		}
		for i, f := range flows {
			if m := f.c.transact(t, stun.MethodRefresh, lifetimeAttr(600)); m.Type.Class != stun.ClassSuccessResponse {
				t.Errorf("step %s, flow %d: Refresh on the old process: %v", step, i, m)
			}
			roundTrips(t, f.relay, echo.addr, 3)
		}
		if err := old.ready(); err != nil {
			t.Errorf("step %s: old process not ready: %v", step, err)
		}
	}
	if n := strings.Count(old.out.String(), "the successor failed before it confirmed; serving on"); n != 3 {
		t.Errorf("the old process logged %d failed hand-overs, want 3 (one per step)", n)
	}
	old.signalled = true
	next := startTakeover(t, old)
	if exited, err := old.waitExit(60 * time.Second); !exited || err != nil {
		t.Fatalf("old ternd after the takeover: exited %v, %v", exited, err)
	}
	testenv.Eventually(t, readyTimeout, func() error {
		if next.exited() {
			t.Fatalf("new ternd exited: %v", next.waitErr)
		}
		return next.ready()
	})
	checkAfterTakeover(t, flows)
}

// TestSIGUSR2StartsSuccessor: SIGUSR2 makes ternd start its own binary
// with --takeover (nginx's binary upgrade), which takes over; the old
// process exits 0 and the allocations relay through the successor. The
// processes write to a file, not a pipe, since the successor outlives the
// process the test started.
func TestSIGUSR2StartsSuccessor(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	cfg := defaultConfig(t)
	takeoverConfig(t)(&cfg)
	dir := t.TempDir()
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ternd.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "ternd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(terndBinary(t), "-c", path, "-l", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed when the process has exited, waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	logText := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	successor := 0
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		if successor > 0 {
			_ = syscall.Kill(successor, syscall.SIGINT)
			testenv.Eventually(t, stopTimeout, func() error {
				if syscall.Kill(successor, 0) == nil {
					return fmt.Errorf("successor %d still running", successor)
				}
				return nil
			})
		}
		if t.Failed() {
			t.Logf("ternd output:\n%s", logText())
		}
	})
	s := &server{cfg: cfg, addr: &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: cfg.Listeners[0].Port},
		healthURL: "http://" + cfg.Admin.HealthAddress, metricsURL: "http://" + cfg.Admin.MetricsAddress}
	testenv.Eventually(t, readyTimeout, s.ready)
	echo := startEchoPeer(t, "127.0.0.1:0")
	flows := startFlows(t, s, echo, 5)

	if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("old ternd after SIGUSR2: %v", waitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("old ternd still running 60 s after SIGUSR2")
	}
	_, after, ok := strings.Cut(logText(), "successorPID=")
	if !ok {
		t.Fatal("no successor PID logged")
	}
	pid, _, _ := strings.Cut(after, "\n")
	if successor, err = strconv.Atoi(strings.TrimSpace(pid)); err != nil {
		t.Fatalf("successor PID %q: %v", pid, err)
	}
	testenv.Eventually(t, readyTimeout, s.ready)
	if v, _ := s.metric(t, "stunner_allocations_active"); v != 5 {
		t.Errorf("allocations on the successor: %v, want 5", v)
	}
	checkAfterTakeover(t, flows)
}

// TestTakeoverKeepsStreams: a TURN-TCP client's connection stays with the
// old ternd across a takeover and keeps relaying there, while the
// successor takes the TURN-UDP allocations and new TCP clients; the old
// process exits once that last connection closes.
func TestTakeoverKeepsStreams(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	withSocket := takeoverConfig(t)
	old := startTernd(t, func(c *config) { withSocket(c); withTCP(c) })
	addr := old.addr.String()
	echo := startEchoPeer(t, "127.0.0.1:0")
	flows := startFlows(t, old, echo, 5)

	conn, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Username: testUser,
		Password: testPassword, Realm: testRealm, Conn: turn.NewSTUNConn(conn)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := cl.Allocate()
	if err != nil {
		t.Fatalf("Allocate over TCP: %v", err)
	}
	held := &tcpRelay{relay: relay, peer: echo}
	held.check(t)
	old.waitMetric(t, "stunner_allocations_active", 6, 10*time.Second)
	// Counters carry on across the switch: failed authentications made
	// before it, and none after, are still counted by the new process.
	for range 3 {
		if _, err := newPionClient(t, old, testUser, "wrong").Allocate(); err == nil {
			t.Fatal("Allocate with a wrong password succeeded")
		}
	}
	failures, _ := old.metric(t, "tern_auth_failures_total")
	if failures < 3 {
		t.Fatalf("tern_auth_failures_total %v before the switch, want at least 3", failures)
	}

	old.signalled = true
	next := startTakeover(t, old)
	testenv.Eventually(t, readyTimeout, func() error {
		if next.exited() {
			t.Fatalf("new ternd exited: %v", next.waitErr)
		}
		return next.ready()
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(old.out.String(), "TCP and TLS connections stay here until they close") {
			return errors.New("the old ternd has not said it keeps its TCP connection")
		}
		return nil
	})
	if old.exited() {
		t.Fatalf("the old ternd exited with a TCP connection open: %v\n%s", old.waitErr, old.out.String())
	}
	held.check(t) // through the old process
	checkAfterTakeover(t, flows)
	fresh := relayOverTCP(t, addr) // accepted by the new process
	fresh.check(t)
	// The new process holds the 5 UDP allocations and the new TCP one; the
	// old process's TCP allocation is not among them.
	next.waitMetric(t, "stunner_allocations_active", 6, 10*time.Second)
	if v, _ := next.metric(t, "tern_auth_failures_total"); v != failures {
		t.Errorf("tern_auth_failures_total on the new process %v, want the old one's %v carried on", v, failures)
	}

	cl.Close()
	conn.Close()
	start := time.Now()
	if exited, err := old.waitExit(20 * time.Second); !exited || err != nil {
		t.Fatalf("old ternd after its last TCP connection closed: exited %v, %v\n%s", exited, err, old.out.String())
	}
	t.Logf("the old ternd exited %v after its last TCP connection closed", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(old.out.String(), "the last TCP or TLS connection closed") {
		t.Errorf("the old ternd's log does not say why it exited:\n%s", old.out.String())
	}
	checkAfterTakeover(t, flows)
}
