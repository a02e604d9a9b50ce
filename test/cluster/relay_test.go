//go:build cluster

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// The TURN side of deploy/examples/stunner-reference-udp-gateway.yaml (STUNner's reference UDP
// Gateway) and testdata/gateway-prereqs.yaml.
const (
	turnUser, turnPass, turnRealm = "user-1", "pass-1", "stunner.l7mp.io"
	gatewaySelector               = "stunner.l7mp.io/related-gateway-name=udp-gateway"
	gatewayNamespace              = "stunner"
	turnPort                      = 3478
	echoPort                      = 9001
	propagationChanges            = 20
)

// TestTURNRelay is issue 10's end-to-end test on the real node, with Tern installed by its
// Helm chart: the operator renders ternd for STUNner's reference UDP Gateway, its pods taking
// their config from the config discovery service with no ServiceAccount token (the default,
// checkCDSMode, on the pod network and on hostNetwork); TURN clients
// (turnutils_uclient and pion/turn) in the control plane's network namespace relay through the ternd pod
// to an echo in a media-server pod behind the UDPRoute (coturn's turnutils_peer run in the
// pod's network namespace) with no loss, by the pod's address and through the Gateway's
// Service (ClusterIP and node port, kube-proxy's rules), and not to a pod no route names; a
// new media-server pod is reachable soon after its EndpointSlice lists it; config changes
// propagate (measured, for BENCHMARKS.md); the Dataplane switched to hostNetwork by `helm
// upgrade` relays through the node address and the Service again; deleting the Gateway removes
// its Deployment and Service at once, and its draining pod within the grace period.
// The steps run in order and share the cluster's state: the first to fail ends the test.
func TestTURNRelay(t *testing.T) {
	dir := cluster(t)
	installOperator(t)
	root := repoRoot(t)
	uclient, err := exec.LookPath("turnutils_uclient")
	testenv.Require(t, "turnutils_uclient (hack/test-deps.sh installs coturn)", err)
	_, err = exec.LookPath("turnutils_peer")
	testenv.Require(t, "turnutils_peer (hack/test-deps.sh installs coturn)", err)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	testdata := func(name string) string { return filepath.Join(root, "test", "cluster", "testdata", name) }

	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "deployment/bystander", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	bystander := runningPods(t, "media-plane", "app=bystander")[0]
	startPeer(t, dir, echo)
	startPeer(t, dir, bystander)

	var podServer string // ternd by its pod's address
	var first pod        // the Gateway's first ternd pod
	step("FirstRelayedPacket", func(t *testing.T) {
		// Time from kubectl apply to the first packet relayed to the echo.
		start := time.Now()
		kubectl(t, "apply", "-f", filepath.Join(root, "deploy", "examples", "stunner-reference-udp-gateway.yaml"))
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, gatewaySelector)
			if err != nil || len(pods) == 0 {
				return fmt.Errorf("no Ready ternd pod for the Gateway (%v)", err)
			}
			first = pods[0]
			podServer = net.JoinHostPort(first.ip, strconv.Itoa(turnPort))
			return echoOnce(podServer, echo.ip, 500*time.Millisecond)
		})
		t.Logf("first packet relayed to the echo pod %.2fs after kubectl apply of the Gateway (ternd at %s)", time.Since(start).Seconds(), podServer)
		checkCDSMode(t, dir, first, "deployment", "udp-gateway")
	})

	step("UnroutedPodRefused", func(t *testing.T) {
		a, err := allocate(podServer)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := echoVia(a.relay, bystander.ip, time.Second); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("relay to the bystander pod %s (no route): %v, want a 403", bystander.ip, err)
		}
	})

	// By the pod's address and through the Gateway's Service (ClusterIP, node port).
	step("Relay", func(t *testing.T) {
		checkRelay(t, uclient, echo.ip, append([]string{podServer}, serviceServers(t)...)...)
	})

	step("ScaledMediaServer", func(t *testing.T) {
		checkScaledPod(t, dir, podServer, echo)
	})

	step("ConfigPropagation", func(t *testing.T) {
		kubectl(t, "apply", "-f", testdata("toggled-peer.yaml"))
		adds, removals := measurePropagation(t, podServer, bystander, propagationChanges)
		t.Logf("config propagation, EndpointSlice write to the new peer relayable: %s", summary(adds))
		t.Logf("config propagation, EndpointSlice write to the removed peer cut off: %s", summary(removals))
	})

	// The Dataplane on hostNetwork (helm upgrade): ternd on the node's address, and the
	// Service's endpoint with it.
	var nodeServer string // ternd by its node's address
	step("HostNetwork", func(t *testing.T) {
		firstEnd := watchPodEnd(t, first)
		helmUpgrade(t, chartValues(installOperator(t), true))
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, gatewaySelector)
			if err != nil || len(pods) != 1 || pods[0].ip != pods[0].hostIP {
				return fmt.Errorf("want one Ready ternd pod on its node's address, have %v (%v)", pods, err)
			}
			nodeServer = net.JoinHostPort(pods[0].ip, strconv.Itoa(turnPort))
			return nil
		})
		// On the node's network too: config from the service by its ClusterIP, no token.
		checkCDSMode(t, dir, runningPods(t, gatewayNamespace, gatewaySelector)[0], "deployment", "udp-gateway")
		checkRelay(t, uclient, echo.ip, append([]string{nodeServer}, serviceServers(t)...)...)
		// The first pod has no allocations left when the rollout deletes it: the new relay
		// address ($(NODE_IP)) reached it through the config discovery service, which serves
		// old and new pods the same config, and restarted its listeners (docs/operations.md). So ternd exits at SIGTERM, well before the grace period.
		select {
		case end, ok := <-firstEnd:
			if !ok {
				t.Fatalf("first ternd pod %s still there 5 minutes after the switch to hostNetwork", first.name)
			}
			t.Logf("first ternd pod %s, no allocations left, gone %.1fs after it began terminating (grace period %v)",
				first.name, end.gone.Sub(end.terminating).Seconds(), dataplaneGrace)
		case <-time.After(dataplaneGrace + 30*time.Second):
			t.Fatalf("first ternd pod %s still there %v after the relay checks on hostNetwork", first.name, dataplaneGrace+30*time.Second)
		}
	})

	step("GatewayDeleted", func(t *testing.T) {
		checkGatewayDeletion(t, nodeServer, echo.ip)
	})
}

// serviceServers returns the TURN server addresses of the Gateway's Service: its ClusterIP
// and, on a NodePort or LoadBalancer Service, the node port on the first node's address
// (served by kube-proxy's rules in that node's network namespace, whichever node runs ternd).
func serviceServers(t *testing.T) []string {
	t.Helper()
	out := kubectl(t, "-n", gatewayNamespace, "get", "service", "udp-gateway", "-o",
		`jsonpath={.spec.type} {.spec.clusterIP} {.spec.ports[?(@.port==3478)].nodePort}`)
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("Service %s/udp-gateway: %q", gatewayNamespace, out)
	}
	servers := []string{net.JoinHostPort(f[1], strconv.Itoa(turnPort))}
	if len(f) == 3 && f[2] != "0" {
		servers = append(servers, net.JoinHostPort(firstNode(t).ip, f[2]))
	} else if f[0] == "NodePort" || f[0] == "LoadBalancer" {
		t.Fatalf("Service %s/udp-gateway of type %s has no node port: %q", gatewayNamespace, f[0], out)
	}
	t.Logf("Service %s/udp-gateway: type %s, TURN at %v", gatewayNamespace, f[0], servers)
	return servers
}

// checkRelay relays to the echo on echoIP through each server: first one datagram (waiting
// for the path, e.g. kube-proxy's rules), then turnutils_uclient's 10 x 100 through all of
// them at once, then pion/turn's run (relayRun) through each; no datagram may be lost.
func checkRelay(t *testing.T, uclient, echoIP string, servers ...string) {
	t.Helper()
	for _, server := range servers {
		start := time.Now()
		testenv.Eventually(t, 30*time.Second, func() error { return echoOnce(server, echoIP, 500*time.Millisecond) })
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Logf("first packet relayed through %s %.2fs after it was tried", server, d.Seconds())
		}
	}
	checkUclient(t, uclient, echoIP, servers...)
	for _, server := range servers {
		checkPionRun(t, server, echoIP)
	}
}

// checkScaledPod scales the media servers to two and wants the new pod reachable soon after
// its EndpointSlice lists it (or its echo starts, when that came later): well under a second
// on a quiet machine (BENCHMARKS.md), asserted only within propagationBound.
func checkScaledPod(t *testing.T, dir, server string, echo pod) {
	t.Helper()
	a, err := allocate(server)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old := map[string]bool{echo.ip: true}
	kubectl(t, "-n", "media-plane", "scale", "deployment/media-server", "--replicas=2")
	var added pod
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, p := range runningPodsNow("media-plane", "app=media-server") {
			if !old[p.ip] {
				added = p
				return nil
			}
		}
		return errors.New("no new media-server pod yet")
	})
	listed := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if readyEndpoint("media-plane", "media-server-pool", added.ip) {
				listed <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(listed)
	}()
	startPeer(t, dir, added)
	peerUp := time.Now()
	var reached time.Time
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := echoVia(a.relay, added.ip, 100*time.Millisecond); err != nil {
			return err
		}
		reached = time.Now()
		return nil
	})
	tListed, ok := <-listed
	if !ok {
		t.Fatalf("the EndpointSlice of media-server-pool never listed %s as ready", added.ip)
	}
	base := tListed
	if peerUp.After(base) {
		base = peerUp
	}
	lag := reached.Sub(base)
	t.Logf("new media-server pod %s reachable through ternd %v after it was listed ready and echoing (listed %v, echo up %v)",
		added.ip, lag.Round(time.Millisecond), tListed.Format("15:04:05.000"), peerUp.Format("15:04:05.000"))
	if lag > propagationBound {
		t.Errorf("new media-server pod reachable %v after its EndpointSlice change, want within %v", lag, propagationBound)
	}
}

// checkGatewayDeletion deletes the Gateway while a client holds an allocation on its ternd pod
// (server) and turnutils_uclient's allocations, never released, are there too: the
// Deployment and Service go at once; the pod terminates but drains: the held allocation keeps
// relaying and new ones are refused (508); ternd waits for its allocations, and as
// turnutils_uclient's stay, the pod goes when the Dataplane's grace period
// (terminationGracePeriodSeconds) ends and the kubelet kills it.
func checkGatewayDeletion(t *testing.T, server, echoIP string) {
	t.Helper()
	pods, err := readyPods(gatewayNamespace, gatewaySelector)
	if err != nil || len(pods) != 1 {
		t.Fatalf("want one Ready ternd pod before deleting the Gateway, have %v (%v)", pods, err)
	}
	held, err := allocate(server)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := echoVia(held.relay, echoIP, time.Second); err != nil {
		t.Fatal(err)
	}
	end := watchPodEnd(t, pods[0])
	start := time.Now()
	kubectl(t, "-n", gatewayNamespace, "delete", "gateway", "udp-gateway", "--wait=false")
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "deployments,services", "-l", gatewaySelector, "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			return fmt.Errorf("left after deleting the Gateway: %q (%v)", out, err)
		}
		if !podTerminating(pods[0]) {
			return fmt.Errorf("ternd pod %s not terminating after deleting the Gateway", pods[0].name)
		}
		return nil
	})
	t.Logf("Gateway deleted: Deployment and Service gone, pod %s terminating, %.1fs after kubectl delete", pods[0].name, time.Since(start).Seconds())

	// Draining, once the kubelet's SIGTERM is there: a new allocation is refused, the held
	// one keeps relaying.
	testenv.Eventually(t, 30*time.Second, func() error {
		a, err := allocate(server)
		if err == nil {
			a.Close()
			return errors.New("a new allocation on the terminating ternd pod succeeded, want it refused (508) once ternd drains")
		}
		if !strings.Contains(err.Error(), "508") {
			return fmt.Errorf("a new allocation on the terminating ternd pod: %v, want 508 (Insufficient Capacity)", err)
		}
		return nil
	})
	t.Logf("ternd draining (new allocations refused with 508) %.1fs after kubectl delete", time.Since(start).Seconds())
	if err := echoVia(held.relay, echoIP, time.Second); err != nil {
		t.Errorf("the allocation held through the deletion stopped relaying while its pod drains: %v", err)
	}
	held.Close()

	// The bound: the grace period from the deletion, then the kubelet's kill and bookkeeping
	// (about 2 s on a quiet machine, 10 s and more when it is loaded).
	bound := dataplaneGrace + 30*time.Second
	select {
	case e, ok := <-end:
		if !ok {
			t.Fatalf("ternd pod %s still there 5 minutes after the Gateway's deletion", pods[0].name)
		}
		t.Logf("ternd pod %s, holding turnutils_uclient's allocations, gone %.1fs after kubectl delete of the Gateway (grace period %v)",
			pods[0].name, e.gone.Sub(start).Seconds(), dataplaneGrace)
		if e.gone.Sub(start) > bound {
			t.Errorf("ternd pod gone %v after the Gateway's deletion, want within %v", e.gone.Sub(start), bound)
		}
	case <-time.After(time.Until(start.Add(bound))):
		logs, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "logs", pods[0].name, "--tail=20")
		t.Fatalf("ternd pod %s still there %v after the Gateway's deletion; its log:\n%s", pods[0].name, bound, logs)
	}
	if out := kubectl(t, "-n", gatewayNamespace, "get", "all", "-l", gatewaySelector, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("left after deleting the Gateway: %s", out)
	}
}

// startPeer runs coturn's turnutils_peer (a UDP echo) on p's address, port 9001, inside p's
// network namespace, and waits until it echoes.
func startPeer(t *testing.T, dir string, p pod) {
	t.Helper()
	startPeerAt(t, dir, p, p.ip)
}

// startPeerAt is startPeer with the echo on ip, one of p's addresses (its IPv6 one, say).
func startPeerAt(t *testing.T, dir string, p pod, ip string) {
	t.Helper()
	pid := sandboxPID(t, dir, p.name)
	cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "--",
		"turnutils_peer", "-L", ip, "-p", strconv.Itoa(echoPort))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		conn, err := net.Dial("udp", net.JoinHostPort(ip, strconv.Itoa(echoPort)))
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != "ping" {
			return fmt.Errorf("turnutils_peer in %v does not echo (%v): %s", p, err, out.String())
		}
		return nil
	})
}
