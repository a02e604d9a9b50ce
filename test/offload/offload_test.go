package offload

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v4"
	"github.com/pion/transport/v4/stdnet"
	"github.com/pion/turn/v4"
	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// Addresses of the topology (netns_test.go) and ports of ternd's config.
const (
	listenAddr = "10.0.1.1:24610"
	metricsURL = "http://10.0.1.1:24611/metrics"
	readyURL   = "http://10.0.1.1:24612/ready"
	peerA      = "10.0.2.2" // in the allowlist, given a permission and a channel
	peerC      = "10.0.2.3" // outside the allowlist
	peerB      = "10.0.2.4" // in the allowlist, never given a permission
)

// ternConfig is ternd's config with the listener on 10.0.1.1, relayed
// addresses on 10.0.2.1 and endpoints (quoted, comma-separated) as the
// peers' cluster.
func ternConfig(endpoints string) string { return ternConfigOn("10.0.1.1", "10.0.2.1", endpoints) }

// ternConfigOn is ternConfig with the listener and relay addresses given
// (IPv6 ones for the IPv6 tests); the admin addresses stay on 10.0.1.1.
func ternConfigOn(listener, relay, endpoints string) string {
	return `version: v1
admin: {name: offload-e2e, metricsAddress: "10.0.1.1:24611", healthAddress: "10.0.1.1:24612"}
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: "` + listener + `", port: 24610, routes: [peers]}
clusters:
  - {name: peers, endpoints: [` + endpoints + `]}
relay: {address: "` + relay + `", minPort: 24620, maxPort: 24699}
offload: {engine: Auto}
`
}

// rig is ternd with offload on in tp.tern, its config file and log.
type rig struct {
	tp      topo
	cfgPath string
	log     *testenv.LockedBuffer
	http    *http.Client
	stop    func() // SIGTERM and wait; later calls do nothing
	pid     int    // ternd's (ip netns exec and a wrapper exec it in place)
}

// startTernd runs ternd in tp.tern with the offload on (Auto) and args
// added to its command line, and waits until it is ready.
func startTernd(t *testing.T, tp topo, args ...string) *rig {
	t.Helper()
	return startTerndAs(t, tp, testenv.Ternd(t), nil, filepath.Join(t.TempDir(), "tern.yaml"), args...)
}

// startTerndAs is startTernd with ternd's binary bin, run through the
// command wrap (e.g. setpriv and its options; nil: none), and its config
// written to cfgPath (readable by everyone when wrap is given, so that a
// process that gave up root can read it).
func startTerndAs(t *testing.T, tp topo, bin string, wrap []string, cfgPath string, args ...string) *rig {
	t.Helper()
	return startTerndWith(t, tp, bin, wrap, cfgPath, ternConfig(`"`+peerA+`", "`+peerB+`"`), args...)
}

// startTerndWith is startTerndAs with the config cfg.
func startTerndWith(t *testing.T, tp topo, bin string, wrap []string, cfgPath, cfg string, args ...string) *rig {
	t.Helper()
	r := &rig{tp: tp, cfgPath: cfgPath, log: &testenv.LockedBuffer{}, http: httpIn(tp.client)}
	mode := os.FileMode(0o600)
	if wrap != nil {
		mode = 0o644
	}
	if err := os.WriteFile(r.cfgPath, []byte(cfg), mode); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"netns", "exec", tp.tern}, wrap...)
	cmd := exec.Command("ip", append(append(argv, bin, "-c", r.cfgPath, "-w",
		"--udp-thread-num=1", "--relay-thread-num=1", "--grace-period=0s", "-l", "info"), args...)...)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.pid = cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("ternd log:\n%s", r.log)
		}
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		resp, err := r.http.Get(readyURL)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s", resp.Status)
		}
		return nil
	})
	if !strings.Contains(r.log.String(), `msg="offload attached"`) {
		t.Fatalf("offload did not attach:\n%s", r.log)
	}
	return r
}

func (r *rig) metrics(t *testing.T) map[string]float64 { return metrics(t, r.http, metricsURL) }

// echoPeer echoes every datagram on ip:port in the peers' namespace and
// counts them.
type echoPeer struct {
	c   *net.UDPConn
	mu  sync.Mutex
	got int
}

func startEchoPeer(t *testing.T, tp topo, addr string) *echoPeer {
	p := &echoPeer{c: udpIn(t, tp.peer, addr)}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := p.c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.got++
			p.mu.Unlock()
			_, _ = p.c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return p
}

func (p *echoPeer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got
}

// pionClient allocates through ternd from a socket in the client's
// namespace and returns the client, its socket and the relayed conn.
func pionClient(t *testing.T, tp topo) (*turn.Client, *net.UDPConn, net.PacketConn) {
	t.Helper()
	return pionClientOn(t, tp, "10.0.1.2:0", listenAddr)
}

// pionClientOn is pionClient from the client's address local to the
// listener at server (IPv6 ones for the IPv6 tests).
func pionClientOn(t *testing.T, tp topo, local, server string) (*turn.Client, *net.UDPConn, net.PacketConn) {
	t.Helper()
	conn := udpIn(t, tp.client, local)
	std, err := stdnet.NewNet()
	if err != nil {
		t.Fatal(err)
	}
	c, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: server, TURNServerAddr: server,
		Username: "user", Password: "pass", Realm: "stunner.l7mp.io", Conn: conn, RTO: 200 * time.Millisecond, Net: anyFamilyNet{std}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := c.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	return c, conn, relay
}

// anyFamilyNet resolves UDP addresses of either family where pion/turn
// asks for "udp4", so that its client can reach an IPv6 listener.
type anyFamilyNet struct{ transport.Net }

func (n anyFamilyNet) ResolveUDPAddr(_, address string) (*net.UDPAddr, error) {
	return n.Net.ResolveUDPAddr("udp", address)
}

// echoes sends n random payloads through relay to peer and checks each
// comes back identical.
func echoes(t *testing.T, relay net.PacketConn, peer *net.UDPAddr, n, size int) {
	t.Helper()
	buf := make([]byte, 2048)
	for i := range n {
		want := make([]byte, size)
		_, _ = rand.Read(want)
		binary.BigEndian.PutUint32(want, uint32(i))
		if _, err := relay.WriteTo(want, peer); err != nil {
			t.Fatal(err)
		}
		_ = relay.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, from, err := relay.ReadFrom(buf)
		if err != nil {
			t.Fatalf("echo %d of %d lost: %v", i, n, err)
		}
		if !bytes.Equal(buf[:k], want) || from.String() != peer.String() {
			t.Fatalf("echo %d: %d bytes from %v, want %d identical bytes from %v", i, k, from, size, peer)
		}
	}
}

// untilOffloaded sends single echoes through relay to peer until the
// kernel has relayed at least one packet each way, so that what follows
// is counted only once the channel binding is in the offload maps. How
// many packets pion sends as Send indications before its ChannelBind
// completes depends on scheduling; measuring after this point does not.
// It fails t after 500 echoes.
func untilOffloaded(t *testing.T, r *rig, relay net.PacketConn, peer *net.UDPAddr) {
	t.Helper()
	for range 500 {
		echoes(t, relay, peer, 1, 160)
		m := r.metrics(t)
		if m[`tern_offload_packets_total{direction="client_to_peer"}`] > 0 && m[`tern_offload_packets_total{direction="peer_to_client"}`] > 0 {
			return
		}
	}
	t.Fatalf("500 echoes and the kernel has not relayed one each way; offload series:\n%v", offloadSeries(r.metrics(t)))
}

// delta returns the change of each series from before to after.
func delta(before, after map[string]float64) map[string]float64 {
	d := make(map[string]float64, len(after))
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// TestOffloadEndToEnd runs ternd with offload Auto between two veth pairs,
// once with the tc program attached as Auto chooses (tcx on this kernel
// when it has tcx, Linux 6.6 on) and once forced to a clsact qdisc
// (--offload-attach Clsact, what kernels without tcx get), and checks,
// through real clients: pion and turnutils_uclient relay with no loss
// and identical payloads, mostly in the kernel; the counters count every
// packet once; peers without a permission or outside the allowlist never
// reach the client; removing the route and Refresh 0 stop the kernel path
// from the next packet on; the clsact qdisc and Tern's filter exist while
// ternd runs and are gone after it stops.
func TestOffloadEndToEnd(t *testing.T) {
	for _, attach := range []string{"Auto", "Clsact"} {
		t.Run(attach, func(t *testing.T) { testEndToEnd(t, attach) })
	}
}

// kernelHasTCX reports whether uname says Linux 6.6 or later.
func kernelHasTCX() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > 6 || ma == 6 && mi >= 6
}

func testEndToEnd(t *testing.T, attach string) {
	tp := newTopo(t)
	r := startTernd(t, tp, "--offload-attach", attach)
	wantAttach := "clsact"
	if attach == "Auto" && kernelHasTCX() {
		wantAttach = "tcx"
	}
	for _, ifn := range []string{tp.ct, tp.pt} {
		series := `tern_offload_interface{interface="` + ifn + `",hook="TC",attach="` + wantAttach + `",egress="fib",why="forwarding_on"}`
		if v := r.metrics(t)[series]; v != 1 {
			t.Errorf("%s = %v, want 1; offload series:\n%v", series, v, offloadSeries(r.metrics(t)))
		}
		clsact, filters := tcIngress(t, tp.tern, ifn)
		if wantAttach == "clsact" && (!clsact || len(filters) != 1 || filters[0] != "tern_tc") {
			t.Errorf("%s while ternd runs: clsact %v, filters %v; want a clsact qdisc with tern_tc", ifn, clsact, filters)
		}
		if wantAttach == "tcx" && clsact {
			t.Errorf("%s has a clsact qdisc with tcx attached", ifn)
		}
	}
	if wantAttach == "clsact" {
		defer func() {
			r.stop()
			for _, ifn := range []string{tp.ct, tp.pt} {
				if clsact, filters := tcIngress(t, tp.tern, ifn); clsact || len(filters) != 0 {
					t.Errorf("%s after ternd stopped: clsact %v, filters %v; want neither", ifn, clsact, filters)
				}
			}
		}()
	}
	a := startEchoPeer(t, tp, peerA+":24640")
	peerAddr := a.c.LocalAddr().(*net.UDPAddr)

	_, _, relay := pionClient(t, tp)
	untilOffloaded(t, r, relay, peerAddr)
	warm := a.count()
	m0 := r.metrics(t)
	const n = 1000
	echoes(t, relay, peerAddr, n, 160)
	m := delta(m0, r.metrics(t))
	t.Logf("pion: %d echoes; kernel relayed %v to the peer and %v back", n,
		m[`tern_offload_packets_total{direction="client_to_peer"}`], m[`tern_offload_packets_total{direction="peer_to_client"}`])
	for _, s := range []string{`stunner_cluster_packets_total{name="peers",direction="tx"}`, `stunner_cluster_packets_total{name="peers",direction="rx"}`,
		`tern_peer_packets_total{direction="tx"}`, `tern_peer_packets_total{direction="rx"}`} {
		if m[s] != n {
			t.Errorf("%s = %v, want %d", s, m[s], n)
		}
	}
	if k := m[`tern_offload_packets_total{direction="client_to_peer"}`]; k != n {
		t.Errorf("once the channel was bound the kernel relayed %v of %d to the peer; want all; offload series:\n%v", k, n, offloadSeries(r.metrics(t)))
	}
	if k := m[`tern_offload_packets_total{direction="peer_to_client"}`]; k != n {
		t.Errorf("once the channel was bound the kernel relayed %v of %d to the client; want all", k, n)
	}
	if got := a.count() - warm; got != n {
		t.Errorf("peer got %d, want %d", got, n)
	}

	t.Run("peers without permission", func(t *testing.T) {
		before := r.metrics(t)[`tern_dropped_packets_total{reason="no_permission"}`]
		relayAddr := relay.LocalAddr().(*net.UDPAddr)
		const k = 20
		for _, ip := range []string{peerB, peerC} {
			c := udpIn(t, tp.peer, ip+":0")
			for i := range k {
				if _, err := c.WriteToUDP([]byte("unsolicited "+strconv.Itoa(i)), relayAddr); err != nil {
					t.Fatal(err)
				}
			}
		}
		// They pass the kernel untouched and the engine drops each.
		testenv.Eventually(t, 5*time.Second, func() error {
			if got := r.metrics(t)[`tern_dropped_packets_total{reason="no_permission"}`] - before; got != 2*k {
				return fmt.Errorf("dropped for no permission: %v, want %d", got, 2*k)
			}
			return nil
		})
		// Nothing of theirs reaches the client; the echo path still works.
		echoes(t, relay, peerAddr, 5, 100)
	})

	t.Run("turnutils_uclient", func(t *testing.T) {
		uclient, err := exec.LookPath("turnutils_uclient")
		testenv.Require(t, "turnutils_uclient (coturn)", err)
		peerBin, err := exec.LookPath("turnutils_peer")
		testenv.Require(t, "turnutils_peer (coturn)", err)
		peer := exec.Command("ip", "netns", "exec", tp.peer, peerBin, "-L", peerA, "-p", "24650")
		if err := peer.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = peer.Process.Kill(); _ = peer.Wait() }()
		before := r.metrics(t)[`tern_offload_packets_total{direction="client_to_peer"}`]
		const clients, messages = 4, 100
		args := []string{"netns", "exec", tp.client, uclient, "-p", "24610", "-u", "user", "-w", "pass",
			"-e", peerA, "-r", "24650", "-m", strconv.Itoa(clients), "-n", strconv.Itoa(messages), "-l", "120", "-c", "10.0.1.1"}
		var out []byte
		for attempt := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			cmd := exec.CommandContext(ctx, "ip", args...)
			cmd.WaitDelay = 5 * time.Second
			out, err = cmd.CombinedOutput()
			cancel()
			// A client that draws one channel number twice gets the 400
			// RFC 8656 §12 requires and exits: the tool, not the server.
			if attempt == 0 && err != nil && strings.Contains(string(out), "channel bind: error 400") {
				continue
			}
			break
		}
		tot := regexp.MustCompile(`tot_send_msgs=(\d+), tot_recv_msgs=(\d+)`).FindAllStringSubmatch(string(out), -1)
		loss := regexp.MustCompile(`Total lost packets (\d+)`).FindAllStringSubmatch(string(out), -1)
		if err != nil || len(tot) == 0 || len(loss) == 0 {
			t.Fatalf("turnutils_uclient: %v\n%s", err, out)
		}
		last := tot[len(tot)-1]
		if last[1] != strconv.Itoa(clients*messages) || last[2] != last[1] || loss[len(loss)-1][1] != "0" {
			t.Errorf("turnutils_uclient sent %s, received %s, lost %s; want %d each way, none lost", last[1], last[2], loss[len(loss)-1][1], clients*messages)
		}
		k := r.metrics(t)[`tern_offload_packets_total{direction="client_to_peer"}`] - before
		t.Logf("turnutils_uclient: sent %s, received %s, lost %s; the kernel relayed %v to the peer", last[1], last[2], loss[len(loss)-1][1], k)
		if k < clients*messages/2 {
			t.Errorf("the kernel relayed only %v of %d", k, clients*messages)
		}
	})

	t.Run("refresh 0", func(t *testing.T) {
		c, conn, relay2 := pionClient(t, tp)
		echoes(t, relay2, peerAddr, 20, 64) // binds channel 0x4000
		got := a.count()
		allocs := r.metrics(t)["stunner_allocations_active"]
		if err := relay2.Close(); err != nil { // Refresh with LIFETIME 0
			t.Fatal(err)
		}
		c.Close()
		testenv.Eventually(t, 5*time.Second, func() error {
			if v := r.metrics(t)["stunner_allocations_active"]; v != allocs-1 {
				return fmt.Errorf("allocations %v, want %v", v, allocs-1)
			}
			return nil
		})
		noKernelPath(t, r, conn, a, got, "no_allocation")
	})

	t.Run("route removed", func(t *testing.T) {
		_, conn, relay3 := pionClient(t, tp)
		echoes(t, relay3, peerAddr, 20, 64)
		got := a.count()
		applied := strings.Count(r.log.String(), `msg="config applied"`)
		if err := os.WriteFile(r.cfgPath, []byte(ternConfig(`"`+peerB+`"`)), 0o600); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			if strings.Count(r.log.String(), `msg="config applied"`) == applied {
				return fmt.Errorf("config not applied yet")
			}
			return nil
		})
		noKernelPath(t, r, conn, a, got, "no_channel")
	})
}

// TestOffloadOneArm runs ternd with offload Auto where forwarding is off
// and every route leaves by ternd's one interface (newOneArmTopo), by
// tcx and by clsact, over IPv4 and over IPv6 (client, listener, relay and
// peer all IPv6, as in a pod of a dual-stack or IPv6 cluster): the kernel
// relays in same-interface mode, without the FIB's forwarding check, and
// the pion client's echoes come back complete, all of them relayed in the
// kernel once the channel is bound.
func TestOffloadOneArm(t *testing.T) {
	families := []struct {
		name                          string
		listener, relay, client, peer string
	}{
		{"IPv4", "10.0.1.1", "10.0.2.1", "10.0.1.2:0", peerA + ":24640"},
		{"IPv6", "fd00:1::1", "fd00:2::1", "[fd00:1::2]:0", "[fd00:2::2]:24640"},
	}
	for _, attach := range []string{"TCX", "Clsact"} {
		for _, fam := range families {
			t.Run(attach+"/"+fam.name, func(t *testing.T) {
				if attach == "TCX" && !kernelHasTCX() {
					t.Skip("tcx needs Linux 6.6")
				}
				tp := newOneArmTopo(t)
				peerIP := fam.peer[:strings.LastIndexByte(fam.peer, ':')]
				cfg := ternConfigOn(fam.listener, fam.relay, `"`+strings.Trim(peerIP, "[]")+`"`)
				r := startTerndWith(t, tp, testenv.Ternd(t), nil, filepath.Join(t.TempDir(), "tern.yaml"), cfg, "--offload-attach", attach)
				series := `tern_offload_interface{interface="` + tp.ct + `",hook="TC",attach="` + strings.ToLower(attach) +
					`",egress="same_interface",why="single_interface"}`
				if v := r.metrics(t)[series]; v != 1 {
					t.Fatalf("%s = %v, want 1; offload series:\n%v", series, v, offloadSeries(r.metrics(t)))
				}
				a := startEchoPeer(t, tp, fam.peer)
				peer := a.c.LocalAddr().(*net.UDPAddr)
				_, _, relay := pionClientOn(t, tp, fam.client, net.JoinHostPort(fam.listener, "24610"))
				if got := relay.LocalAddr().(*net.UDPAddr).IP.String(); got != fam.relay {
					t.Fatalf("relayed transport address %v, want one on %s", relay.LocalAddr(), fam.relay)
				}
				untilOffloaded(t, r, relay, peer)
				warm, m0 := a.count(), r.metrics(t)
				const n = 500
				echoes(t, relay, peer, n, 160)
				m := delta(m0, r.metrics(t))
				c2p, p2c := m[`tern_offload_packets_total{direction="client_to_peer"}`], m[`tern_offload_packets_total{direction="peer_to_client"}`]
				t.Logf("pion over %s: %d echoes once bound; kernel relayed %v to the peer and %v back", fam.name, n, c2p, p2c)
				if c2p != n || p2c != n {
					t.Errorf("once the channel was bound the kernel relayed %v of %d to the peer and %v back; want all", c2p, n, p2c)
				}
				if got := a.count() - warm; got != n {
					t.Errorf("peer got %d, want %d", got, n)
				}
				if k := m[`tern_offload_passed_packets_total{reason="forwarding_disabled"}`]; k != 0 {
					t.Errorf("%v packets passed for forwarding off", k)
				}
			})
		}
	}
}

// offloadSeries returns the tern_offload_ series of m, for messages.
func offloadSeries(m map[string]float64) string {
	var b strings.Builder
	for k, v := range m {
		if strings.HasPrefix(k, "tern_offload_") {
			fmt.Fprintf(&b, "%s %v\n", k, v)
		}
	}
	return b.String()
}

// noKernelPath sends ChannelData on channel 0x4000 from conn, the socket
// of a client whose path was just stopped, and checks that each packet
// reaches the engine, which drops it for reason, and none the peer.
func noKernelPath(t *testing.T, r *rig, conn *net.UDPConn, peer *echoPeer, peerHad int, reason string) {
	t.Helper()
	series := `tern_dropped_packets_total{reason="` + reason + `"}`
	before := r.metrics(t)[series]
	to, _ := net.ResolveUDPAddr("udp4", listenAddr)
	const k = 10
	for i := range k {
		cd := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0x4000), 8)
		cd = append(cd, fmt.Sprintf("late %03d", i)...)
		if _, err := conn.WriteToUDP(cd, to); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := r.metrics(t)[series] - before; got != k {
			return fmt.Errorf("%s rose by %v, want %d", series, got, k)
		}
		return nil
	})
	if got := peer.count() - peerHad; got != 0 {
		t.Errorf("the peer got %d packets after the path stopped", got)
	}
}
