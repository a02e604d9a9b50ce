package offload

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
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

	"github.com/tern-gw/tern/internal/testenv"
)

// proc is one ternd of a hand-over in the tern namespace.
type proc struct {
	log  *testenv.LockedBuffer
	pid  int
	done chan struct{}
	err  error
}

// startProc runs ternd's binary bin in tp.tern through the command wrap
// (nil: none) with cfgPath and args, without waiting.
func startProc(t *testing.T, tp topo, wrap []string, bin, cfgPath string, args ...string) *proc {
	t.Helper()
	p := &proc{log: &testenv.LockedBuffer{}, done: make(chan struct{})}
	argv := append(append([]string{"netns", "exec", tp.tern}, wrap...), bin, "-c", cfgPath, "-w",
		"--udp-thread-num=1", "--relay-thread-num=1", "--grace-period=0s", "-l", "info")
	cmd := exec.Command("ip", append(argv, args...)...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("ternd %d log:\n%s", p.pid, p.log)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits for p to exit, failing t after a generous bound.
func (p *proc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ternd %d still running after 60s", p.pid)
	}
}

func waitReady(t *testing.T, c *http.Client) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		resp, err := c.Get(readyURL)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s", resp.Status)
		}
		return nil
	})
}

// hoFlow is one allocation of the takeover test: a pion client whose
// relayed conn echoes numbered datagrams off a peer through a channel.
type hoFlow struct {
	c              *turn.Client
	relay          net.PacketConn
	sent, received atomic.Int64
	stopRead       atomic.Bool
}

// refresh sends a Refresh (RFC 8656 §7.3) for f's allocation with
// long-term credentials (first unauthenticated, for the nonce) and
// returns the response's class.
func (f *hoFlow) refresh(t *testing.T) stun.MessageClass {
	t.Helper()
	lifetime := stun.RawAttribute{Type: stun.AttrLifetime, Value: binary.BigEndian.AppendUint32(nil, 600)}
	srv := f.c.TURNServerAddr()
	m := stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodRefresh, stun.ClassRequest), lifetime, stun.Fingerprint)
	res, err := f.c.PerformTransaction(m, srv, false)
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	var nonce stun.Nonce
	if err := nonce.GetFrom(res.Msg); err != nil {
		return res.Msg.Type.Class
	}
	m = stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodRefresh, stun.ClassRequest), lifetime,
		stun.NewUsername("user"), stun.NewRealm("stunner.l7mp.io"), nonce,
		stun.NewLongTermIntegrity("user", "stunner.l7mp.io", "pass"), stun.Fingerprint)
	res, err = f.c.PerformTransaction(m, srv, false)
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	return res.Msg.Type.Class
}

// TestTakeoverKeepsOffload hands a ternd whose offload relays over to a
// successor (--takeover), by tcx (Auto on this kernel when it has tcx)
// and by clsact: pion clients relay through channels in the kernel
// throughout. First the successor is killed at each step before it
// confirms: the old process serves on and its kernel path relays every
// datagram. Then a successor takes over under load: the kernel's
// counters (tern_offload_packets_total, carried across) count every
// datagram sent meanwhile (none fell to the sockets), no allocation is
// lost, the loss is reported, and each allocation refreshes, binds a new
// channel and relays on the new process. The last run has both processes
// as a rendered offload pod's would be at least: user 65532 with only the
// offload's three capabilities (ambient).
func TestTakeoverKeepsOffload(t *testing.T) {
	for _, attach := range []string{"Auto", "Clsact"} {
		t.Run(attach, func(t *testing.T) { testTakeoverKeepsOffload(t, attach, attach, nil) })
	}
	// A successor told to attach otherwise adopts, then reopens for its
	// own settings once its sockets read again: the sockets relay
	// meanwhile, and nothing is lost.
	if kernelHasTCX() {
		t.Run("Clsact then TCX", func(t *testing.T) { testTakeoverKeepsOffload(t, "Clsact", "TCX", nil) })
	}
	t.Run("Auto as 65532 with three capabilities", func(t *testing.T) {
		_, err := exec.LookPath("setpriv")
		testenv.Require(t, "setpriv (util-linux)", err)
		testTakeoverKeepsOffload(t, "Auto", "Auto", []string{"setpriv", "--reuid=" + nonRootID, "--regid=" + nonRootID, "--clear-groups",
			"--bounding-set=-all," + offloadCaps, "--inh-caps=-all," + offloadCaps, "--ambient-caps=-all," + offloadCaps, "--"})
	})
}

// testTakeoverKeepsOffload runs the first ternd with --offload-attach
// attach and its successors with nextAttach.
func testTakeoverKeepsOffload(t *testing.T, attach, nextAttach string, wrap []string) {
	tp := newTopo(t)
	dir, bin, mode := t.TempDir(), testenv.Ternd(t), os.FileMode(0o600)
	if wrap != nil {
		// Readable by the unprivileged user, and its own hand-over
		// directory (as the rendered init container makes it).
		dir, mode = worldReadableDir(t), 0o644
		copyFile(t, bin, filepath.Join(dir, "ternd"), 0o755)
		bin = filepath.Join(dir, "ternd")
		if err := os.Mkdir(filepath.Join(dir, "run"), 0o700); err != nil {
			t.Fatal(err)
		}
		id, _ := strconv.Atoi(nonRootID)
		if err := os.Chown(filepath.Join(dir, "run"), id, id); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "tern.yaml")
	cfg := strings.Replace(ternConfig(`"`+peerA+`", "`+peerB+`"`), "healthAddress: \"10.0.1.1:24612\"}",
		"healthAddress: \"10.0.1.1:24612\", handoverSocket: \""+filepath.Join(dir, "run", "ternd.sock")+"\"}", 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), mode); err != nil {
		t.Fatal(err)
	}
	hc := httpIn(tp.client)
	old := startProc(t, tp, wrap, bin, cfgPath, "--offload-attach", attach)
	waitReady(t, hc)
	if !strings.Contains(old.log.String(), `msg="offload attached"`) {
		t.Fatalf("offload did not attach:\n%s", old.log)
	}
	if wrap != nil {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", old.pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Uid:\t" + nonRootID + "\t", "CapEff:\t" + offloadCapsHex} {
			if !strings.Contains(string(status), want) {
				t.Fatalf("ternd's /proc status lacks %q:\n%s", want, status)
			}
		}
	}
	wantAttach := "clsact"
	if attach == "Auto" && kernelHasTCX() {
		wantAttach = "tcx"
	}
	ifSeries := `tern_offload_interface{interface="` + tp.ct + `",hook="TC",attach="` + wantAttach + `",egress="fib",why="forwarding_on"}`
	a := startEchoPeer(t, tp, peerA+":24640")
	b := startEchoPeer(t, tp, peerB+":24641")
	peerAddr := a.c.LocalAddr().(*net.UDPAddr)
	const nFlows = 12
	flows := make([]*hoFlow, nFlows)
	for i := range flows {
		c, _, relay := pionClient(t, tp)
		flows[i] = &hoFlow{c: c, relay: relay}
		echoes(t, relay, peerAddr, 3, 100) // permission, channel bound
	}
	r := &rig{tp: tp, http: hc}
	untilOffloaded(t, r, flows[0].relay, peerAddr)
	for _, f := range flows[1:] {
		echoes(t, f.relay, peerAddr, 2, 100)
	}
	c2p, p2c := `tern_offload_packets_total{direction="client_to_peer"}`, `tern_offload_packets_total{direction="peer_to_client"}`

	// Killed at each step: the old process's kernel path relays on.
	for _, step := range []string{"hello", "received", "imported"} {
		next := startProc(t, tp, wrap, bin, cfgPath, "--offload-attach", attach, "--takeover", "--takeover-exit-at", step)
		next.waitExit(t)
		if old.exited() {
			t.Fatalf("step %s: the old process exited: %v", step, old.err)
		}
		waitReady(t, hc)
		m0 := r.metrics(t)
		for _, f := range flows {
			if cl := f.refresh(t); cl != stun.ClassSuccessResponse {
				t.Errorf("step %s: Refresh on the old process: %v", step, cl)
			}
			echoes(t, f.relay, peerAddr, 5, 100)
		}
		m := delta(m0, r.metrics(t))
		if m[c2p] != 5*nFlows || m[p2c] != 5*nFlows {
			t.Errorf("step %s: the old process's kernel path relayed %v and %v of %d each way; want all", step, m[c2p], m[p2c], 5*nFlows)
		}
		if v := r.metrics(t)[ifSeries]; v != 1 {
			t.Errorf("step %s: %s = %v, want 1", step, ifSeries, v)
		}
	}
	if n := strings.Count(old.log.String(), "the successor failed before it confirmed; serving on"); n != 3 {
		t.Errorf("the old process logged %d failed hand-overs, want 3", n)
	}

	// The takeover under load.
	pre := r.metrics(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range flows {
		wg.Add(2)
		go func() { // reader
			defer wg.Done()
			buf := make([]byte, 2048)
			for {
				_ = f.relay.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, _, err := f.relay.ReadFrom(buf); err != nil {
					if f.stopRead.Load() {
						return
					}
					continue
				}
				f.received.Add(1)
			}
		}()
		go func() { // sender: one datagram every 4 ms
			defer wg.Done()
			tick := time.NewTicker(4 * time.Millisecond)
			defer tick.Stop()
			payload := make([]byte, 120)
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				binary.BigEndian.PutUint64(payload, uint64(f.sent.Load()))
				if _, err := f.relay.WriteTo(payload, peerAddr); err == nil {
					f.sent.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second) // load before the switch (not asserted on)
	before := r.metrics(t)
	allocs := before["stunner_allocations_active"]
	next := startProc(t, tp, wrap, bin, cfgPath, "--offload-attach", nextAttach, "--takeover")
	old.waitExit(t)
	if old.err != nil {
		t.Fatalf("old ternd after the takeover: %v", old.err)
	}
	waitReady(t, hc)
	switched := r.metrics(t)
	time.Sleep(time.Second) // load after the switch
	close(stop)
	// Drain: wait for the echoes still in flight, up to 5 s, while
	// they keep coming (what never comes is reported as lost).
	for last, i := int64(-1), 0; i < 50; i++ {
		var sent, got int64
		for _, f := range flows {
			sent, got = sent+f.sent.Load(), got+f.received.Load()
		}
		if got >= sent || (got == last && i >= 10) {
			break
		}
		last = got
		time.Sleep(100 * time.Millisecond)
	}
	for _, f := range flows {
		f.stopRead.Store(true)
	}
	wg.Wait()
	var sent, got int64
	for _, f := range flows {
		sent, got = sent+f.sent.Load(), got+f.received.Load()
	}
	after := r.metrics(t)
	lost := sent - got
	t.Logf("%s: %d allocations; clients sent %d datagrams under load, %d echoes came back, %d lost (%.3f%%)",
		attach, nFlows, sent, got, lost, 100*float64(lost)/float64(max(sent, 1)))
	t.Logf("kernel counters: client_to_peer %v before the switch (old process), %v right after it (new process), %v at the end; peer_to_client %v, %v, %v",
		before[c2p], switched[c2p], after[c2p], before[p2c], switched[p2c], after[p2c])
	if !(before[c2p] < switched[c2p] && switched[c2p] < after[c2p]) || !(before[p2c] < switched[p2c] && switched[p2c] < after[p2c]) {
		t.Errorf("the kernel's counters did not climb through the switch")
	}
	if lost > 0 {
		for k, v := range delta(before, after) {
			if v != 0 && (strings.Contains(k, "drop") || strings.Contains(k, "offload") || strings.Contains(k, "listener_packets")) {
				t.Logf("across the switch: %s +%v", k, v)
			}
		}
	}
	// Every datagram of the load went through the kernel, counted once
	// across the two processes (the successor carries the old one's
	// counts on from the same reading); with a reopen, the sockets
	// relayed some.
	kc, kp := after[c2p]-pre[c2p], after[p2c]-pre[p2c]
	if nextAttach != attach {
		t.Logf("with the reopen: the kernel relayed %v of %d to the peers and %v back, the sockets the rest", kc, sent, kp)
		if !strings.Contains(next.log.String(), "reopening") {
			t.Errorf("the successor with other offload settings did not reopen:\n%s", next.log)
		}
	} else {
		if kc < float64(got) || kc > float64(sent) {
			t.Errorf("the kernel counted %v datagrams to the peer under load; the clients sent %d and %d came back", kc, sent, got)
		}
		if kp < float64(got) || kp > float64(sent) {
			t.Errorf("the kernel counted %v datagrams to the clients under load; the clients sent %d and %d came back", kp, sent, got)
		}
	}
	if lost*1000 > sent {
		t.Errorf("lost %d of %d datagrams across the switch, more than 0.1%%", lost, sent)
	}
	if v := after["stunner_allocations_active"]; v != allocs {
		t.Errorf("allocations after the switch: %v, want %v (0 lost)", v, allocs)
	}
	// It adopted the kernel's entries, every one a path of its own
	// (none pruned), and replaced no program (same binary).
	if l := next.log.String(); !strings.Contains(l, `msg="offload adopted from the predecessor"`) || !strings.Contains(l, "pruned=0") ||
		strings.Contains(l, "programs replaced") {
		t.Errorf("the successor did not adopt the offload cleanly:\n%s", next.log)
	}
	if nextAttach != attach {
		ifSeries = strings.Replace(ifSeries, `attach="`+wantAttach+`"`, `attach="tcx"`, 1)
	}
	if v := after[ifSeries]; v != 1 {
		t.Errorf("after the switch %s = %v, want 1", ifSeries, v)
	}

	// Every allocation refreshes, binds a new channel and relays on the
	// new process, the kernel relaying the echoes.
	peerBAddr := b.c.LocalAddr().(*net.UDPAddr)
	m0 := r.metrics(t)
	for i, f := range flows {
		if cl := f.refresh(t); cl != stun.ClassSuccessResponse {
			t.Errorf("flow %d: Refresh on the new process: %v", i, cl)
		}
		echoes(t, f.relay, peerAddr, 5, 100)
		echoes(t, f.relay, peerBAddr, 5, 100) // a permission and a channel of the new process
	}
	m := delta(m0, r.metrics(t))
	t.Logf("after the switch: the kernel relayed %v to the peers and %v back of %d each way", m[c2p], m[p2c], 10*nFlows)
	if m[c2p] < 5*nFlows || m[p2c] < 5*nFlows {
		t.Errorf("after the switch the kernel relayed %v and %v; want at least the %d echoes of the adopted channels", m[c2p], m[p2c], 5*nFlows)
	}

	// The successor hands the offload it adopted on to a third process:
	// every echo goes through the kernel, counted on from the second's.
	m1 := r.metrics(t)
	third := startProc(t, tp, wrap, bin, cfgPath, "--offload-attach", nextAttach, "--takeover")
	next.waitExit(t)
	if next.err != nil {
		t.Fatalf("second ternd after the second takeover: %v", next.err)
	}
	waitReady(t, hc)
	for _, f := range flows {
		echoes(t, f.relay, peerAddr, 5, 100)
	}
	m2 := r.metrics(t)
	m = delta(m1, m2)
	t.Logf("second switch: kernel counters client_to_peer %v -> %v, peer_to_client %v -> %v", m1[c2p], m2[c2p], m1[p2c], m2[p2c])
	if m[c2p] != 5*nFlows || m[p2c] != 5*nFlows {
		t.Errorf("across the second switch the kernel counted %v and %v of %d echoes each way; want all", m[c2p], m[p2c], 5*nFlows)
	}
	if !strings.Contains(third.log.String(), `msg="offload adopted from the predecessor"`) {
		t.Errorf("the third process did not adopt the offload:\n%s", third.log)
	}
	// The last holder detaches on its way out, as the first would have:
	// the clsact filter and qdisc it adopted go too.
	_ = syscall.Kill(third.pid, syscall.SIGTERM)
	third.waitExit(t)
	for _, ifn := range []string{tp.ct, tp.pt} {
		if clsact, filters := tcIngress(t, tp.tern, ifn); clsact || len(filters) != 0 {
			t.Errorf("%s after the last ternd stopped: clsact %v, filters %v; want neither", ifn, clsact, filters)
		}
	}
}

// TestTakeoverTurnsOffloadOff: a successor with offload engine None
// adopts the old process's programs (clsact here) and detaches them once
// it serves: the filter and qdisc go, the channels relay through its
// sockets, no allocation is lost and the kernel's counter does not go
// backwards.
func TestTakeoverTurnsOffloadOff(t *testing.T) {
	tp := newTopo(t)
	dir, bin := t.TempDir(), testenv.Ternd(t)
	cfgPath := filepath.Join(dir, "tern.yaml")
	cfg := strings.Replace(ternConfig(`"`+peerA+`"`), "healthAddress: \"10.0.1.1:24612\"}",
		"healthAddress: \"10.0.1.1:24612\", handoverSocket: \""+filepath.Join(dir, "run", "ternd.sock")+"\"}", 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	hc := httpIn(tp.client)
	old := startProc(t, tp, nil, bin, cfgPath, "--offload-attach", "Clsact")
	waitReady(t, hc)
	a := startEchoPeer(t, tp, peerA+":24640")
	peerAddr := a.c.LocalAddr().(*net.UDPAddr)
	r := &rig{tp: tp, http: hc}
	var relays []net.PacketConn
	for range 4 {
		_, _, relay := pionClient(t, tp)
		echoes(t, relay, peerAddr, 3, 100)
		relays = append(relays, relay)
	}
	untilOffloaded(t, r, relays[0], peerAddr)
	before := r.metrics(t)
	next := startProc(t, tp, nil, bin, cfgPath, "--offload-engine", "None", "--takeover")
	old.waitExit(t)
	waitReady(t, hc)
	if !strings.Contains(next.log.String(), "the predecessor's programs detached (offload engine None)") {
		t.Errorf("the successor did not detach the adopted programs:\n%s", next.log)
	}
	for _, ifn := range []string{tp.ct, tp.pt} {
		if clsact, filters := tcIngress(t, tp.tern, ifn); clsact || len(filters) != 0 {
			t.Errorf("%s after the switch to None: clsact %v, filters %v; want neither", ifn, clsact, filters)
		}
	}
	for _, relay := range relays {
		echoes(t, relay, peerAddr, 5, 100)
	}
	after := r.metrics(t)
	c2p := `tern_offload_packets_total{direction="client_to_peer"}`
	t.Logf("kernel counter client_to_peer %v before the switch, %v after (carried, the kernel detached)", before[c2p], after[c2p])
	if after[c2p] < before[c2p] {
		t.Errorf("%s went backwards: %v -> %v", c2p, before[c2p], after[c2p])
	}
	if v, w := after["stunner_allocations_active"], before["stunner_allocations_active"]; v != w {
		t.Errorf("allocations %v after the switch, want %v", v, w)
	}
}

// TestTakeoverTurnsOffloadOn: a successor with the offload on, taking
// over from one without (no offload section in the snapshot), attaches
// its programs once it serves and puts the imported channels in: the
// kernel relays their echoes.
func TestTakeoverTurnsOffloadOn(t *testing.T) {
	tp := newTopo(t)
	dir, bin := t.TempDir(), testenv.Ternd(t)
	cfgPath := filepath.Join(dir, "tern.yaml")
	cfg := strings.Replace(ternConfig(`"`+peerA+`"`), "healthAddress: \"10.0.1.1:24612\"}",
		"healthAddress: \"10.0.1.1:24612\", handoverSocket: \""+filepath.Join(dir, "run", "ternd.sock")+"\"}", 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	hc := httpIn(tp.client)
	old := startProc(t, tp, nil, bin, cfgPath, "--offload-engine", "None")
	waitReady(t, hc)
	a := startEchoPeer(t, tp, peerA+":24640")
	peerAddr := a.c.LocalAddr().(*net.UDPAddr)
	r := &rig{tp: tp, http: hc}
	var relays []net.PacketConn
	for range 4 {
		_, _, relay := pionClient(t, tp)
		echoes(t, relay, peerAddr, 3, 100) // permission and channel bound on the old process
		relays = append(relays, relay)
	}
	next := startProc(t, tp, nil, bin, cfgPath, "--takeover")
	old.waitExit(t)
	waitReady(t, hc)
	if !strings.Contains(next.log.String(), `msg="offload attached"`) {
		t.Fatalf("the successor did not attach its offload:\n%s", next.log)
	}
	m0 := r.metrics(t)
	for _, relay := range relays {
		echoes(t, relay, peerAddr, 5, 100)
	}
	m := delta(m0, r.metrics(t))
	c2p, p2c := `tern_offload_packets_total{direction="client_to_peer"}`, `tern_offload_packets_total{direction="peer_to_client"}`
	t.Logf("after the switch the kernel relayed %v and %v of %d echoes each way", m[c2p], m[p2c], 5*len(relays))
	if m[c2p] != float64(5*len(relays)) || m[p2c] != float64(5*len(relays)) {
		t.Errorf("the kernel relayed %v and %v of the imported channels' %d echoes each way; want all", m[c2p], m[p2c], 5*len(relays))
	}
}
