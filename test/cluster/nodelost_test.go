//go:build cluster

package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway TestNodeLost runs on every node, and its load: nlClients pion/turn clients per
// replica, each relaying siRate datagrams a second.
const (
	nlGateway  = "udp-nodelost"
	nlSelector = "stunner.l7mp.io/related-gateway-name=" + nlGateway
	nlPort     = 3482
	nlReplicas = 3
	nlClients  = 4
	// Each replica's relay ports, nlCapacity of them: its capacity in allocations. A surviving
	// replica holding nlClients takes nlCapacity-nlClients of the lost node's clients and
	// sends the rest to the other with 300 Try Alternate (reason capacity).
	nlMinPort  = 41000
	nlCapacity = 6
	// How long the API server and Mimir may take to show the loss: the node controller marks
	// a node NotReady after its grace period (kube-controller-manager's
	// --node-monitor-grace-period, 50 s by default), and the machine is loaded.
	nlShowBound = 5 * time.Minute
)

// nlManifests is the Gateway API side of TestNodeLost; %[1]s is the ternd image. Three
// replicas on hostNetwork (one per node, their ports being host ports), the metrics endpoint
// on, nlCapacity relay ports each (%[2]d-%[3]d), a UDPRoute to the echo.
const nlManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nodelost-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: nodelost-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: nodelost-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: nodelost
  authRef: {name: stunner-auth-secret, namespace: stunner}
  minPort: %[2]d
  maxPort: %[3]d
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: nodelost}
spec:
  replicas: 3
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  hostNetwork: true
  enableMetricsEndpoint: true
  terminationGracePeriodSeconds: 30
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-nodelost
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: nodelost-class
  listeners: [{name: udp-listener, port: 3482, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: nodelost-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-nodelost}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// TestNodeLost is issue 26's node lost. A Gateway's three ternd replicas on hostNetwork, one
// per node, each carry nlClients pion/turn clients relaying to the echo; Mimir and vmagent
// (as in TestKEDAScaling) hold sum(stunner_allocations_active). `hack/cluster.sh node-kill`
// kills one node's processes (its kubelet, kube-proxy, containerd, shims and containers, by
// PID): a node that neither the echo nor the operator runs on, nor tern-node-1 (the control
// plane reaches Services through it). Then:
//   - the times until the Gateway's EndpointSlice no longer lists the lost node's address as
//     ready, and until Mimir's sum(stunner_allocations_active) is the survivors' allocations
//     alone, are logged;
//   - the surviving replicas' clients lose no datagram from before the kill until after both;
//   - once the operator has dropped the lost node from the alternates, the lost node's
//     clients allocate again with the project's client (bench/turnclient, which follows 300
//     Try Alternate) at a surviving replica's address: it takes what its relay ports allow
//     (nlCapacity) and redirects the others to the other survivor, counted in its
//     tern_redirects_total{reason="capacity"}; each relays, every datagram echoed.
//
// The node is started again (`hack/cluster.sh node-start`) when the test ends, and waited for
// until Ready, so the tests after it find the cluster whole.
func TestNodeLost(t *testing.T) {
	dir := cluster(t)
	requireNodes(t, nlReplicas)
	installOperator(t)
	mimirBin := testenv.Mimir(t)
	root := repoRoot(t)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	testdata := func(name string) string { return filepath.Join(root, "test", "cluster", "testdata", name) }
	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	startPeer(t, dir, echo)
	spareOperatorNode(t, echo.node)
	manifests := []byte(fmt.Sprintf(nlManifests, importedImage(t, dir, "ternd"), nlMinPort, nlMinPort+nlCapacity-1))
	run(t, manifests, "kubectl", "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})

	var replicas []pod
	testenv.Eventually(t, 180*time.Second, func() error {
		pods, err := readyPods(gatewayNamespace, nlSelector)
		nodes := map[string]bool{}
		for _, p := range pods {
			if p.ip == p.hostIP {
				nodes[p.node] = true
			}
		}
		if err != nil || len(pods) != nlReplicas || len(nodes) != nlReplicas {
			return fmt.Errorf("want %d Ready ternd pods on %d nodes' addresses, have %v (%v)", nlReplicas, nlReplicas, pods, err)
		}
		for _, p := range pods {
			if err := echoOnce(nlServer(p), echo.ip, 500*time.Millisecond); err != nil {
				return err
			}
		}
		replicas = pods
		return nil
	})
	operator := runningPods(t, releaseNamespace, "app.kubernetes.io/name=tern-operator")
	var lost pod
	var survivors []pod
	for _, p := range replicas {
		spare := p.node != echo.node && p.node != "tern-node-1" && lost.name == ""
		for _, o := range operator {
			spare = spare && p.node != o.node
		}
		if spare {
			lost = p
		} else {
			survivors = append(survivors, p)
		}
	}
	if lost.name == "" {
		t.Fatalf("no node to lose: replicas %v, echo on %s, operator %v", replicas, echo.node, operator)
	}

	mimir := startClusterMimir(t, mimirBin)
	startClusterVmagent(t, os.Getenv("KUBECONFIG"), mimir, nlGateway)

	var load []*loadClient
	t.Cleanup(func() {
		for _, c := range load {
			c.release()
		}
	})
	step("Load", func(t *testing.T) {
		for i := range nlClients * nlReplicas {
			p := replicas[i%nlReplicas]
			c, err := startLoadAt(nlServer(p), p, echo.ip, uint32(i), siRate)
			if err != nil {
				t.Fatalf("client %d on %v: %v", i, p, err)
			}
			load = append(load, c)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			for _, c := range load {
				if _, got := c.counts(); got < siRate/2 {
					return fmt.Errorf("client %d on %v: %d datagrams echoed so far", c.id, c.on, got)
				}
			}
			return nil
		})
		testenv.Eventually(t, 120*time.Second, func() error {
			v, err := mimirSum(mimir)
			if err != nil || v != nlClients*nlReplicas {
				return fmt.Errorf("sum(stunner_allocations_active) = %v (%v), want %d", v, err, nlClients*nlReplicas)
			}
			return nil
		})
		t.Logf("%d pion/turn clients relaying %d datagrams/s each, %d on each of %v; Mimir sums them", len(load), siRate, nlClients, replicas)
	})

	clusterSh := filepath.Join(root, "hack", "cluster.sh")
	var killed time.Time
	step("Kill", func(t *testing.T) {
		killed = time.Now()
		run(t, nil, clusterSh, "node-kill", lost.node)
	})
	t.Cleanup(func() {
		start := time.Now()
		if out, err := tryRun(nil, clusterSh, "node-start", lost.node); err != nil {
			t.Errorf("hack/cluster.sh node-start %s: %v\n%s", lost.node, err, out)
			return
		}
		t.Logf("node %s Ready again %.1fs after node-start", lost.node, time.Since(start).Seconds())
	})

	step("Shown", func(t *testing.T) {
		var inSlice, inMimir time.Duration
		want := float64(nlClients * len(survivors))
		deadline := time.Now().Add(nlShowBound)
		for (inSlice == 0 || inMimir == 0) && time.Now().Before(deadline) {
			if inSlice == 0 && !readyEndpoint(gatewayNamespace, nlGateway, lost.ip) {
				inSlice = time.Since(killed)
			}
			if inMimir == 0 {
				if v, err := mimirSum(mimir); err == nil && v == want {
					inMimir = time.Since(killed)
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
		if inSlice == 0 || inMimir == 0 {
			slices, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name="+nlGateway, "-o", "yaml")
			v, err := mimirSum(mimir)
			t.Fatalf("after %v: EndpointSlice shown %v, Mimir shown %v (sum %v, %v; want %v)\n%s", nlShowBound, inSlice, inMimir, v, err, want, slices)
		}
		t.Logf("node %s lost (replica %v): its address out of the Gateway's EndpointSlice (not ready) %.1fs after the kill; Mimir's sum(stunner_allocations_active) = %v (the survivors' alone) %.1fs after",
			lost.node, lost, inSlice.Seconds(), want, inMimir.Seconds())
	})

	step("Reallocate", func(t *testing.T) {
		start := time.Now()
		testenv.Eventually(t, 60*time.Second, func() error {
			cfg, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "configmap", nlGateway, "-o", `jsonpath={.data.tern\.yaml}`)
			if err != nil {
				return err
			}
			if strings.Contains(cfg, lost.ip+":0") {
				return fmt.Errorf("the Gateway's config still names the lost %s:0 in its alternates:\n%s", lost.ip, cfg)
			}
			return nil
		})
		t.Logf("the lost node out of the Gateway's alternates %.1fs after it left the EndpointSlice", time.Since(start).Seconds())
		to := netip.AddrPortFrom(netip.MustParseAddr(survivors[0].ip), nlPort)
		metrics := "http://" + net.JoinHostPort(survivors[0].ip, "8080") + "/metrics"
		before, err := scrapeSample(metrics, `tern_redirects_total{reason="capacity"}`)
		if err != nil {
			t.Fatal(err)
		}
		redirected := 0
		for _, c := range load {
			if c.on.name != lost.name {
				continue
			}
			sent, got := c.finish()
			c.release()
			r, err := kedaAllocate(to)
			if err != nil {
				t.Fatalf("lost client %d: %v", c.id, err)
			}
			defer r.close()
			if r.c.Server().Addr().String() == lost.ip {
				t.Fatalf("lost client %d allocated again on the lost node %v", c.id, r.c.Server())
			}
			if r.c.Server() != to {
				redirected++
			}
			s, n, err := r.relay(echo.ip, 10)
			if err != nil || n != s {
				t.Fatalf("lost client %d, again on %v: %d of %d datagrams echoed (%v)", c.id, r.c.Server(), n, s, err)
			}
			t.Logf("lost client %d: %d of the %d datagrams it sent echoed (none after the loss); allocated again on %v and relayed", c.id, got, sent, r.c.Server())
		}
		after, err := scrapeSample(metrics, `tern_redirects_total{reason="capacity"}`)
		if err != nil {
			t.Fatal(err)
		}
		if redirected == 0 || after-before < uint64(redirected) {
			t.Errorf("%d of %d lost clients redirected by %v (its tern_redirects_total{reason=\"capacity\"} went from %d to %d); want the %d past its %d relay ports",
				redirected, nlClients, to, before, after, nlClients-(nlCapacity-nlClients), nlCapacity)
		}
		t.Logf("%d of %d lost clients sent on by %v's 300 Try Alternate (at capacity: %d relay ports); its tern_redirects_total{reason=\"capacity\"} +%d",
			redirected, nlClients, to, nlCapacity, after-before)
	})

	step("Survivors", func(t *testing.T) {
		total, lostN := 0, 0
		for _, c := range load {
			if c.on.name == lost.name {
				continue
			}
			sent, got := c.finish()
			total += sent
			lostN += sent - got
			if got != sent {
				t.Errorf("client %d on surviving %v: %d of %d datagrams echoed", c.id, c.on, got, sent)
			}
		}
		t.Logf("surviving replicas' %d clients: %d datagrams sent from before the kill until %.1fs after, %d lost",
			nlClients*len(survivors), total, time.Since(killed).Seconds(), lostN)
	})
}

// nlServer is the TURN address of a TestNodeLost replica: its node's address.
func nlServer(p pod) string { return net.JoinHostPort(p.ip, strconv.Itoa(nlPort)) }

// spareOperatorNode makes sure a node other than tern-node-1 and echoNode runs no operator
// pod, so that TestNodeLost has a node to lose: the scheduler may have put the operator on
// the one node left. Then that node is cordoned, the operator's pod deleted, and, once its
// replacement runs elsewhere, the node uncordoned.
func spareOperatorNode(t *testing.T, echoNode string) {
	t.Helper()
	target := "tern-node-3"
	if echoNode == target {
		target = "tern-node-2"
	}
	onTarget := func() []pod {
		var on []pod
		for _, o := range runningPodsNow(releaseNamespace, "app.kubernetes.io/name=tern-operator") {
			if o.node == target {
				on = append(on, o)
			}
		}
		return on
	}
	moved := onTarget()
	if len(moved) == 0 {
		return
	}
	kubectl(t, "cordon", target)
	// Uncordoned as soon as the operator runs elsewhere: the Gateway's replicas, one per
	// node, come after. The cleanup is for a test that fails before that.
	t.Cleanup(func() { _, _ = tryRun(nil, "kubectl", "uncordon", target) })
	for _, o := range moved {
		kubectl(t, "-n", releaseNamespace, "delete", "pod", o.name, "--wait=false")
	}
	testenv.Eventually(t, 120*time.Second, func() error {
		if on := onTarget(); len(on) > 0 {
			return fmt.Errorf("operator pods still on %s: %v", target, on)
		}
		if pods, err := readyPods(releaseNamespace, "app.kubernetes.io/name=tern-operator"); err != nil || len(pods) == 0 {
			return fmt.Errorf("no Ready operator pod (%v)", err)
		}
		return nil
	})
	kubectl(t, "uncordon", target)
	t.Logf("operator moved off %s, so that it can be the node lost", target)
}
