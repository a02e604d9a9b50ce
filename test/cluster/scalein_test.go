//go:build cluster

package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway TestScaleIn scales in, and its load: siClients pion/turn clients, half on each
// of the two replicas, each relaying siRate datagrams a second; siRedirected new clients sent
// to the draining replica while it drains.
const (
	siGateway    = "udp-scalein"
	siSelector   = "stunner.l7mp.io/related-gateway-name=" + siGateway
	siPort       = 3481
	siClients    = 10
	siRate       = 50
	siRedirected = 5
	// The Dataplane's terminationGracePeriodSeconds: well past the time the test keeps the
	// draining replica's allocations, so that only ternd's own exit on its last allocation
	// can end the pod within siGoneBound of it.
	siGrace = 60
	// How long after its last allocation ended the draining pod must be gone from the API
	// (the goal is a second; the kubelet's bookkeeping on the loaded machine adds to it).
	siGoneBound = 10 * time.Second
	// How long the draining replica's clients keep relaying after the first redirect, before
	// they end their allocations one by one, siReleaseGap apart.
	siDrainHold  = 3 * time.Second
	siReleaseGap = 500 * time.Millisecond
)

// siManifests is the Gateway API side of TestScaleIn; %[1]s is the ternd image. The
// Dataplane runs 2 replicas on hostNetwork (the scheduler puts them on two nodes, their
// listener and health ports being host ports), with the metrics endpoint on.
const siManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: scalein-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: scalein-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: scalein-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: scalein
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: scalein}
spec:
  replicas: 2
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  hostNetwork: true
  enableMetricsEndpoint: true
  terminationGracePeriodSeconds: %[2]d
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-scalein
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: scalein-class
  listeners: [{name: udp-listener, port: 3481, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: scalein-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-scalein}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// TestScaleIn is issue 26's scale-in under load on the real nodes. A Gateway's Deployment of
// two ternd replicas on hostNetwork (two nodes) carries siClients pion/turn clients, half on
// each replica by its node's address, each relaying siRate datagrams a second to the echo pod
// behind the UDPRoute. `kubectl scale` takes the Deployment to one replica; the Deployment
// controller picks the replica to remove, and its ternd drains. Then:
//   - a new unsigned Allocate sent to the draining replica's node address gets 300 Try
//     Alternate with an ALTERNATE-SERVER naming the surviving replica's node address and the
//     listener's port (tern-operator's alternates, port 0 meaning the listener's);
//   - siRedirected clients of bench/turnclient sent there follow it, allocate on the surviving
//     replica and relay through it; the draining replica counts every 300 in
//     tern_redirects_total{reason="draining"};
//   - the draining replica's clients keep relaying, none of their datagrams lost, until they
//     end their allocations one by one (pion's Close: a Refresh of lifetime 0);
//   - the pod is gone from the API within siGoneBound of the last one (the figure is logged;
//     the Dataplane's grace period, siGrace, is far longer, so only ternd's exit on its last
//     allocation can end it that soon);
//   - the surviving replica's clients lose no datagram from before the scale until after the
//     pod is gone.
func TestScaleIn(t *testing.T) {
	dir := cluster(t)
	requireNodes(t, 2)
	installOperator(t)
	root := repoRoot(t)
	_, err := exec.LookPath("turnutils_peer")
	testenv.Require(t, "turnutils_peer (hack/test-deps.sh installs coturn)", err)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	testdata := func(name string) string { return root + "/test/cluster/testdata/" + name }
	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	startPeer(t, dir, echo)

	manifests := []byte(fmt.Sprintf(siManifests, importedImage(t, dir, "ternd"), siGrace))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})

	var replicas []pod // the two ternd pods, each on its node's address
	step("TwoReplicas", func(t *testing.T) {
		start := time.Now()
		run(t, manifests, "kubectl", "apply", "-f", "-")
		testenv.Eventually(t, 180*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, siSelector)
			if err != nil || len(pods) != 2 || pods[0].node == pods[1].node ||
				pods[0].ip != pods[0].hostIP || pods[1].ip != pods[1].hostIP {
				return fmt.Errorf("want 2 Ready ternd pods on two nodes' addresses, have %v (%v)", pods, err)
			}
			for _, p := range pods {
				if err := echoOnce(siServer(p), echo.ip, 500*time.Millisecond); err != nil {
					return err
				}
			}
			replicas = pods
			return nil
		})
		// Each replica's config names both (each leaves itself out when it loads it).
		testenv.Eventually(t, 60*time.Second, func() error {
			cfg, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "configmap", siGateway, "-o", `jsonpath={.data.tern\.yaml}`)
			if err != nil {
				return err
			}
			for _, p := range replicas {
				if !strings.Contains(cfg, p.ip+":0") {
					return fmt.Errorf("the Gateway's config does not name %s:0 in its alternates yet:\n%s", p.ip, cfg)
				}
			}
			return nil
		})
		t.Logf("2 ternd replicas %v relaying, each named in the alternates, %.1fs after kubectl apply", replicas, time.Since(start).Seconds())
	})

	// The load: clients 0, 2, 4... on replicas[0], 1, 3, 5... on replicas[1].
	var load []*loadClient
	t.Cleanup(func() {
		for _, c := range load {
			c.release()
		}
	})
	step("Load", func(t *testing.T) {
		for i := range siClients {
			c, err := startLoad(replicas[i%2], echo.ip, uint32(i))
			if err != nil {
				t.Fatalf("client %d on %v: %v", i, replicas[i%2], err)
			}
			load = append(load, c)
		}
		// Every client relays before the scale-in.
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, c := range load {
				if _, got := c.counts(); got < siRate/2 {
					return fmt.Errorf("client %d on %v: %d datagrams echoed so far", c.id, c.on, got)
				}
			}
			return nil
		})
		t.Logf("%d pion/turn clients relaying %d datagrams/s each, %d on each replica", siClients, siRate, siClients/2)
	})

	var draining, survivor pod
	var scaled time.Time
	var end <-chan podEnd
	step("ScaleIn", func(t *testing.T) {
		scaled = time.Now()
		kubectl(t, "-n", gatewayNamespace, "scale", "deployment/"+siGateway, "--replicas=1")
		testenv.Eventually(t, 60*time.Second, func() error {
			for i, p := range replicas {
				if podTerminating(p) {
					draining, survivor = p, replicas[1-i]
					return nil
				}
			}
			return errors.New("no ternd replica terminating yet")
		})
		end = watchPodEnd(t, draining)
		t.Logf("kubectl scale --replicas=1: %v terminating %.1fs after; %v stays", draining, time.Since(scaled).Seconds(), survivor)
	})

	// The draining replica redirects: an unsigned Allocate gets 300 and the survivor's
	// address; the project's client follows it and relays on the survivor.
	want := netip.AddrPortFrom(netip.MustParseAddr(survivor.ip), siPort)
	drainAddr := netip.AddrPortFrom(netip.MustParseAddr(draining.ip), siPort)
	redirects := 0 // the 300s the draining replica sent
	step("Redirect", func(t *testing.T) {
		var first time.Time
		testenv.Eventually(t, 60*time.Second, func() error {
			code, alt, err := unsignedAllocate(drainAddr)
			if err != nil {
				return err
			}
			if code != stun.CodeTryAlternate {
				return fmt.Errorf("Allocate at %v: %d, want 300 once it drains", drainAddr, code)
			}
			redirects++
			first = time.Now()
			if alt != want {
				t.Fatalf("300 from draining %v names ALTERNATE-SERVER %v, want the surviving replica's %v", drainAddr, alt, want)
			}
			return nil
		})
		t.Logf("draining %v answers Allocate with 300, ALTERNATE-SERVER %v, %.1fs after kubectl scale", drainAddr, want, first.Sub(scaled).Seconds())

		for i := range siRedirected {
			if err := redirectedRelay(drainAddr, want, echo.ip); err != nil {
				t.Fatalf("redirected client %d: %v", i, err)
			}
			redirects++
		}
		metrics := "http://" + net.JoinHostPort(draining.ip, "8080") + "/metrics"
		got, err := scrapeSample(metrics, `tern_redirects_total{reason="draining"}`)
		if err != nil {
			t.Fatal(err)
		}
		// At least one per 300 seen: a retransmitted Allocate would be answered (and counted) again.
		if got < uint64(redirects) {
			t.Errorf(`draining %v: tern_redirects_total{reason="draining"} = %d, want at least the %d 300s the clients saw`, draining, got, redirects)
		}
		survivorRedirects, err := scrapeSample("http://"+net.JoinHostPort(survivor.ip, "8080")+"/metrics", `tern_redirects_total{reason="draining"}`)
		if err != nil {
			t.Fatal(err)
		}
		if survivorRedirects != 0 {
			t.Errorf(`surviving %v: tern_redirects_total{reason="draining"} = %d, want 0`, survivor, survivorRedirects)
		}
		t.Logf("%d new Allocates to the draining replica redirected (1 unsigned probe, %d bench/turnclient clients that allocated and relayed on %v); its tern_redirects_total{reason=\"draining\"} = %d",
			redirects, siRedirected, want, got)
	})

	step("DrainAndGone", func(t *testing.T) {
		// The ternd log of the draining pod, to split the time to its removal into ternd's
		// exit and the kubelet's part.
		logs := exec.Command("kubectl", "-n", gatewayNamespace, "logs", "-f", "--timestamps", draining.name)
		var logBuf lockedBuffer
		logs.Stdout, logs.Stderr = &logBuf, &logBuf
		if err := logs.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = logs.Process.Kill(); _ = logs.Wait() })

		time.Sleep(siDrainHold)
		if podGone(draining) {
			t.Fatalf("draining pod %v gone while its clients held allocations", draining)
		}
		var last time.Time
		for _, c := range load {
			if c.on.name != draining.name {
				continue
			}
			sent, got := c.finish()
			if sent != got {
				t.Errorf("client %d on the draining replica: sent %d, echoed %d, lost %d", c.id, sent, got, sent-got)
			}
			t.Logf("client %d on the draining replica: %d of %d datagrams echoed, %.1fs after kubectl scale; ending its allocation", c.id, got, sent, time.Since(scaled).Seconds())
			last = time.Now()
			c.release()
			time.Sleep(siReleaseGap)
		}
		var e podEnd
		select {
		case got, ok := <-end:
			if !ok {
				t.Fatalf("draining pod %v still there 5 minutes after kubectl scale", draining)
			}
			e = got
		case <-time.After(time.Duration(siGrace)*time.Second + 60*time.Second):
			t.Fatalf("draining pod %v still there %v after its last allocation ended; its log:\n%s", draining, time.Since(last), logBuf.String())
		}
		gone := e.gone.Sub(last)
		if sigterm := logLineAt(logBuf.String(), "SIGTERM: draining"); !sigterm.IsZero() {
			t.Logf("ternd of %v logged SIGTERM %.1fs after kubectl scale", draining, sigterm.Sub(scaled).Seconds())
		}
		drained := logLineAt(logBuf.String(), "drained: no allocations left")
		split := ""
		if !drained.IsZero() {
			split = fmt.Sprintf(" (ternd logged drained %v after it, the API lost the pod %v after that)",
				drained.Sub(last).Round(time.Millisecond), e.gone.Sub(drained).Round(time.Millisecond))
		}
		t.Logf("draining pod %v gone from the API %v after its last allocation ended%s; %.1fs after kubectl scale (grace period %d s)",
			draining, gone.Round(time.Millisecond), split, e.gone.Sub(scaled).Seconds(), siGrace)
		if gone > siGoneBound {
			t.Errorf("draining pod gone %v after its last allocation, want within %v", gone, siGoneBound)
		}
	})

	step("SurvivorLostNothing", func(t *testing.T) {
		if podTerminating(survivor) || podGone(survivor) {
			t.Fatalf("surviving pod %v terminating or gone", survivor)
		}
		total, totalGot := 0, 0
		for _, c := range load {
			if c.on.name != survivor.name {
				continue
			}
			sent, got := c.finish()
			total, totalGot = total+sent, totalGot+got
			if sent != got {
				t.Errorf("client %d on the surviving replica: sent %d, echoed %d, lost %d", c.id, sent, got, sent-got)
			}
			c.release()
		}
		t.Logf("the surviving replica's %d clients: %d of %d datagrams echoed through the scale-in (%.1fs)", siClients/2, totalGot, total, time.Since(scaled).Seconds())
		if pods, err := readyPods(gatewayNamespace, siSelector); err != nil || len(pods) != 1 || pods[0].name != survivor.name {
			t.Errorf("after the scale-in: Ready ternd pods %v (%v), want %v alone", pods, err, survivor)
		}
	})
}

// siServer is the TURN address of a TestScaleIn replica: its node's address.
func siServer(p pod) string { return net.JoinHostPort(p.ip, strconv.Itoa(siPort)) }

// podGone reports whether p is no longer in the API server.
func podGone(p pod) bool {
	out, err := tryRun(nil, "kubectl", "-n", p.namespace, "get", "pod", p.name, "--ignore-not-found", "-o", "name")
	return err == nil && strings.TrimSpace(out) == ""
}

// loadClient is one pion/turn client of TestScaleIn: its allocation on one replica relays
// siRate datagrams a second (runSize bytes, its id and a sequence number) to the echo until
// finish, and counts the distinct ones that come back.
type loadClient struct {
	id     uint32
	on     pod
	server string // the TURN server (host:port) the allocation is on
	a      *turnAlloc
	stop   chan struct{}
	sent   chan int // the count of datagrams sent, once stop is closed

	mu       sync.Mutex
	seen     map[uint32]bool
	nSent    int
	last     time.Time     // when the last echo came
	maxGap   time.Duration // the longest time between two echoes
	readDone chan struct{}
	once     sync.Once
}

// startLoad allocates on p (by its node's address) and starts relaying to the echo on
// echoIP:9001.
func startLoad(p pod, echoIP string, id uint32) (*loadClient, error) {
	return startLoadAt(siServer(p), p, echoIP, id, siRate)
}

// startLoadAt is startLoad on the TURN server at server (p's), relaying rate datagrams a
// second.
func startLoadAt(server string, p pod, echoIP string, id uint32, rate int) (*loadClient, error) {
	a, err := allocate(server)
	if err != nil {
		return nil, err
	}
	return startLoadOn(a, server, p, echoIP, id, rate), nil
}

// startLoadOn is startLoadAt with an allocation a already made on server (over TURN-DTLS,
// say).
func startLoadOn(a *turnAlloc, server string, p pod, echoIP string, id uint32, rate int) *loadClient {
	c := &loadClient{id: id, on: p, server: server, a: a, stop: make(chan struct{}), sent: make(chan int, 1),
		seen: map[uint32]bool{}, readDone: make(chan struct{})}
	peer := &net.UDPAddr{IP: net.ParseIP(echoIP), Port: echoPort}
	go func() {
		defer close(c.readDone)
		buf := make([]byte, 1500)
		for {
			n, from, err := a.relay.ReadFrom(buf)
			if err != nil {
				return // finish's deadline, or Close
			}
			if from.String() != peer.String() || n != runSize || binary.BigEndian.Uint32(buf[0:4]) != id {
				continue
			}
			now := time.Now()
			c.mu.Lock()
			c.seen[binary.BigEndian.Uint32(buf[4:8])] = true
			if !c.last.IsZero() && now.Sub(c.last) > c.maxGap {
				c.maxGap = now.Sub(c.last)
			}
			c.last = now
			c.mu.Unlock()
		}
	}()
	go func() {
		msg := make([]byte, runSize)
		binary.BigEndian.PutUint32(msg[0:4], id)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-c.stop:
				c.sent <- n
				return
			case <-tick.C:
			}
			binary.BigEndian.PutUint32(msg[4:8], uint32(n))
			if _, err := a.relay.WriteTo(msg, peer); err != nil {
				continue // counted as not sent; a refused permission would show as no echo at all
			}
			n++
			c.mu.Lock()
			c.nSent = n
			c.mu.Unlock()
		}
	}()
	return c
}

// counts returns how many datagrams c has sent and how many came back so far.
func (c *loadClient) counts() (sent, received int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nSent, len(c.seen)
}

// finish stops sending, waits up to runLinger for the echoes still on their way and returns
// how many datagrams c sent and how many distinct ones came back. The allocation stays.
func (c *loadClient) finish() (sent, received int) {
	close(c.stop)
	sent = <-c.sent
	deadline := time.Now().Add(runLinger)
	for time.Now().Before(deadline) {
		if _, got := c.counts(); got >= sent {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = c.a.relay.SetReadDeadline(time.Now())
	<-c.readDone
	_, received = c.counts()
	return sent, received
}

// release ends c's allocation (pion's Close sends a Refresh of lifetime 0); idempotent.
func (c *loadClient) release() { c.once.Do(c.a.Close) }

// unsignedAllocate sends a client's first Allocate (REQUESTED-TRANSPORT UDP, no credentials)
// to server and returns the response's error code (0 for a success) and, for a 300, its
// ALTERNATE-SERVER.
func unsignedAllocate(server netip.AddrPort) (stun.ErrorCode, netip.AddrPort, error) {
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	defer conn.Close()
	req, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
		rawAttr{stun.AttrRequestedTransport, []byte{17, 0, 0, 0}}, stun.Fingerprint)
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	if _, err := conn.WriteToUDPAddrPort(req.Raw, server); err != nil {
		return 0, netip.AddrPort{}, err
	}
	buf := make([]byte, 1500)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return 0, netip.AddrPort{}, fmt.Errorf("no answer to an Allocate from %v: %w", server, err)
		}
		res := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
		if res.Decode() != nil || res.TransactionID != req.TransactionID {
			continue
		}
		if res.Type.Class == stun.ClassSuccessResponse {
			return 0, netip.AddrPort{}, nil
		}
		var ec stun.ErrorCodeAttribute
		if err := ec.GetFrom(res); err != nil {
			return 0, netip.AddrPort{}, fmt.Errorf("error response from %v without ERROR-CODE", server)
		}
		if ec.Code != stun.CodeTryAlternate {
			return ec.Code, netip.AddrPort{}, nil
		}
		var as stun.AlternateServer
		if err := as.GetFrom(res); err != nil {
			return ec.Code, netip.AddrPort{}, fmt.Errorf("300 from %v without ALTERNATE-SERVER", server)
		}
		ip, _ := netip.AddrFromSlice(as.IP)
		return ec.Code, netip.AddrPortFrom(ip.Unmap(), uint16(as.Port)), nil
	}
}

// rawAttr is a STUN attribute added as is.
type rawAttr struct {
	t stun.AttrType
	v []byte
}

func (a rawAttr) AddTo(m *stun.Message) error { m.Add(a.t, a.v); return nil }

// redirectedRelay is one of TestScaleIn's new clients: bench/turnclient allocates at the
// draining replica drain, must end up on want (following the 300), relays 10 datagrams to
// the echo on echoIP:9001 in Send indications, each echoed, and ends its allocation.
func redirectedRelay(drain, want netip.AddrPort, echoIP string) error {
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := turnclient.New(conn, drain, turnclient.Credentials{Username: turnUser, Password: turnPass})
	relayed, err := c.Allocate(0)
	if err != nil {
		return fmt.Errorf("Allocate at the draining %v: %w", drain, err)
	}
	if c.Server() != want || relayed.Addr() != want.Addr() {
		return fmt.Errorf("allocated on %v (relayed %v), want the surviving replica %v", c.Server(), relayed, want)
	}
	defer c.Refresh(0)
	peer := netip.AddrPortFrom(netip.MustParseAddr(echoIP), echoPort)
	if err := c.CreatePermission(peer); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for i := range 10 {
		payload := fmt.Sprintf("scalein-redirected-%d", i)
		frame, _, err := turnclient.SendIndication(peer, []byte(payload))
		if err != nil {
			return err
		}
		if _, err := conn.WriteToUDPAddrPort(frame, want); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return fmt.Errorf("no echo of %q through %v: %w", payload, want, err)
			}
			if p, ok := turnclient.Payload(buf[:n]); ok && string(p) == payload {
				break
			}
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
	return nil
}

// scrapeSample reads the sample of series (name and labels, as /metrics writes them) from a
// ternd's /metrics.
func scrapeSample(url, series string) (uint64, error) {
	body, err := httpGet(url)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", series, url)
}

// logLineAt returns the timestamp kubectl logs --timestamps put on the first line of log
// that contains needle, or zero.
func logLineAt(log, needle string) time.Time {
	sc := bufio.NewScanner(bytes.NewReader([]byte(log)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, needle) {
			continue
		}
		ts, _, _ := strings.Cut(line, " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return at
		}
	}
	return time.Time{}
}
