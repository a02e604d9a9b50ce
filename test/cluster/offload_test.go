//go:build cluster

package cluster

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateways of TestOffloadRelay: one on the pod network under the chart's default Dataplane
// (offload turned on by a Helm upgrade), one on the node's network under a Dataplane of its
// own, each on a port no other test's Gateway takes on the node's network.
const (
	offPodGateway      = "udp-offload-pod"
	offHostGateway     = "udp-offload-host"
	offNonRootGateway  = "udp-offload-nonroot"
	offNonRootSelector = "stunner.l7mp.io/related-gateway-name=" + offNonRootGateway
	offPodSelector     = "stunner.l7mp.io/related-gateway-name=" + offPodGateway
	offHostSelector    = "stunner.l7mp.io/related-gateway-name=" + offHostGateway
	offPodPort         = 3478
	offHostPort        = 3480
	// offloadShare is the least share of the relayed datagrams the kernel must carry: the
	// first datagrams of each client go as Send indications while pion binds the channel,
	// and only ChannelData is offloaded.
	offloadShare = 0.95
)

// offManifests: %[1]s is the ternd image, %[2]s the echo pod's IPv6 address. The pod-network
// Gateway's GatewayConfig names no Dataplane, so it gets the chart's default one; its route
// names the echo pod by its IPv6 address too: a selectorless headless Service (media-server-v6)
// with an EndpointSlice of addressType IPv6 that the test writes, since the Services of
// hack/cluster.sh are IPv4 only (a Service with a selector would get no IPv6 EndpointSlice
// there). The hostNetwork Dataplane attaches to cni0,
// the pods' bridge, where the datagrams of clients and peers on the same node arrive at the
// node's address, and to eth0, the node's link to the others (hack/cluster.sh), where those
// of pods on other nodes arrive.
const offManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: offload-pod-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: offload-pod-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: offload-pod-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-offload-pod
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: offload-pod-class
  listeners: [{name: udp-listener, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: offload-pod-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-offload-pod}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}, {name: media-server-v6, namespace: media-plane}]}]
---
apiVersion: v1
kind: Service
metadata: {name: media-server-v6, namespace: media-plane}
spec:
  clusterIP: None
  ipFamilyPolicy: SingleStack
  ipFamilies: [IPv6]
  ports:
  - {name: echo, port: 9001, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: media-server-v6
  namespace: media-plane
  labels: {kubernetes.io/service-name: media-server-v6}
addressType: IPv6
ports:
- {name: echo, port: 9001, protocol: UDP}
endpoints:
- addresses: ["%[2]s"]
  conditions: {ready: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: offload-host-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: offload-host-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: offload-host-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: offload-host
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: offload-host}
spec:
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  hostNetwork: true
  enableMetricsEndpoint: true
  offloadEngine: Auto
  offloadInterfaces: [cni0, eth0]
  terminationGracePeriodSeconds: 5
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-offload-host
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: offload-host-class
  listeners: [{name: udp-listener, port: 3480, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: offload-host-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-offload-host}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: offload-nonroot-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: offload-nonroot-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: offload-nonroot-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: offload-nonroot
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: offload-nonroot}
spec:
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd-offload]
  args: [-w, --udp-thread-num=16]
  enableMetricsEndpoint: true
  offloadEngine: Auto
  terminationGracePeriodSeconds: 5
  containerSecurityContext:
    runAsUser: 65532
    runAsGroup: 65532
    runAsNonRoot: true
    allowPrivilegeEscalation: false
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-offload-nonroot
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: offload-nonroot-class
  listeners: [{name: udp-listener, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: offload-nonroot-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-offload-nonroot}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: offload-client, namespace: media-plane}
spec:
  replicas: 1
  selector:
    matchLabels: {app: offload-client}
  template:
    metadata:
      labels: {app: offload-client}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: pause
        image: tern.local/pause:3.10
        imagePullPolicy: Never
`

// TestOffloadRelay is issue 25's offload on the real node: the chart upgraded with
// dataplane.offloadEngine Auto, a Gateway on the pod network and one on the node's network
// (hostNetwork) relay pion/turn's and turnutils_uclient's datagrams
// from a client pod to the echo pod with no loss, at least offloadShare of them in the kernel (tern_offload_packets_total
// against tern_peer_packets_total, both from the pod's /metrics), and each Gateway says
// OffloadActive=True. A third Gateway's Dataplane runs the image's ternd-offload (ternd with
// file capabilities) as uid 65532 with no privilege escalation: its process has exactly the
// three capabilities, and relays in the kernel like the root ones. On the pod-network Gateway
// the same runs over IPv6 (relayIPv6): clients in the control plane's network namespace reach
// ternd at its pod's IPv6 address, ask for an IPv6 relayed transport address
// (REQUESTED-ADDRESS-FAMILY) and relay to the echo pod's IPv6 address. The offload is checked
// before the clients run too: the pods' /offload
// reports, which the operator reads, say how each interface runs.
func TestOffloadRelay(t *testing.T) {
	dir := cluster(t)
	tag := installOperator(t)
	root := repoRoot(t)
	uclient, err := exec.LookPath("turnutils_uclient")
	testenv.Require(t, "turnutils_uclient (hack/test-deps.sh installs coturn)", err)
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
	echo6, err := ipv6Of(echo)
	if err != nil {
		t.Fatal(err)
	}
	startPeerAt(t, dir, echo, echo6.String())

	vals := chartValues(tag, false)
	vals["dataplane"].(map[string]any)["offloadEngine"] = "Auto"
	helmUpgrade(t, vals)
	t.Cleanup(func() { helmUpgrade(t, chartValues(tag, false)) })
	if got := kubectl(t, "get", "dataplane", "default", "-o", "jsonpath={.spec.offloadEngine}"); got != "Auto" {
		t.Fatalf("default Dataplane offloadEngine %q after helm upgrade, want Auto", got)
	}

	manifests := []byte(fmt.Sprintf(offManifests, importedImage(t, dir, "ternd"), echo6))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	run(t, manifests, "kubectl", "apply", "-f", "-")
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/offload-client", "--timeout=120s")
	client := runningPods(t, "media-plane", "app=offload-client")[0]
	clientPID := sandboxPID(t, dir, client.name)
	listen := func() (net.PacketConn, error) { return listenInNetns(clientPID) }

	gateways := []struct {
		name, selector string
		port           int
		hostNetwork    bool
		nonRoot        bool   // runs ternd-offload as 65532 (file capabilities), not ternd as root
		ipv6           bool   // relays over IPv6 too (relayIPv6)
		revokeRoute    string // the UDPRoute whose backend the test removes at the end, if any
	}{
		{offPodGateway, offPodSelector, offPodPort, false, false, true, "offload-pod-route"},
		{offHostGateway, offHostSelector, offHostPort, true, false, false, "offload-host-route"},
		{offNonRootGateway, offNonRootSelector, offPodPort, false, true, false, ""},
	}
	for _, g := range gateways {
		step(g.name, func(t *testing.T) {
			var ternd pod
			testenv.Eventually(t, 180*time.Second, func() error {
				pods, err := readyPods(gatewayNamespace, g.selector)
				if err != nil || len(pods) != 1 || (g.hostNetwork && pods[0].ip != pods[0].hostIP) {
					return fmt.Errorf("want one Ready ternd pod (hostNetwork %v), have %v (%v)", g.hostNetwork, pods, err)
				}
				ternd = pods[0]
				return nil
			})
			server := net.JoinHostPort(ternd.ip, strconv.Itoa(g.port))
			report, err := httpGet("http://" + net.JoinHostPort(ternd.ip, "8086") + "/offload")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: ternd pod %s, /offload: %s", g.name, ternd, strings.TrimSpace(report))
			sc := kubectl(t, "-n", gatewayNamespace, "get", "deployment", g.name, "-o", "jsonpath={.spec.template.spec.containers[0].securityContext}")
			t.Logf("%s: container securityContext %s", g.name, sc)
			if strings.Contains(sc, `"privileged":true`) {
				t.Errorf("%s: the offload pod is privileged: %s", g.name, sc)
			}
			if g.nonRoot {
				status, err := processStatus("ternd-offload")
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: ternd-offload's /proc status: %s", g.name, strings.Join(status, "; "))
				for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "CapEff:\t000000c000001000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
					if !slices.Contains(status, want) {
						t.Errorf("%s: ternd-offload's status lacks %q", g.name, want)
					}
				}
			}

			testenv.Eventually(t, 120*time.Second, func() error {
				st := kubectl(t, "-n", gatewayNamespace, "get", "gateway", g.name, "-o",
					`jsonpath={.status.conditions[?(@.type=="OffloadActive")].status} {.status.conditions[?(@.type=="OffloadActive")].reason}: {.status.conditions[?(@.type=="OffloadActive")].message}`)
				if !strings.HasPrefix(st, "True ") {
					return fmt.Errorf("Gateway %s OffloadActive: %q", g.name, st)
				}
				t.Logf("%s: OffloadActive %s", g.name, st)
				return nil
			})

			metricsURL := "http://" + net.JoinHostPort(ternd.ip, "8080") + "/metrics"
			// The first allocation, from the client pod, checks the way before counting.
			testenv.Eventually(t, 60*time.Second, func() error {
				a, err := allocateFrom(server, listen)
				if err != nil {
					return err
				}
				defer a.Close()
				return echoVia(a.relay, echo.ip, 500*time.Millisecond)
			})

			// measure runs f, a relay run through ternd at via, and wants at least
			// offloadShare of its datagrams relayed by the kernel each way. warmed says f
			// counts only the datagrams after its channels are bound (warmRelayRun,
			// relay6Run), from lastWarmCounts.
			measure := func(what, via string, warmed bool, f func() error) {
				t.Helper()
				before, err := scrapeOffload(metricsURL)
				if err != nil {
					t.Fatal(err)
				}
				if err := f(); err != nil {
					t.Errorf("%s via %s: %v", what, via, err)
					return
				}
				if warmed {
					before = lastWarmCounts
				}
				// The counters are read at scrape time; the last echoes may still be on the way
				// back when f returns.
				var d offloadCounts
				testenv.Eventually(t, 10*time.Second, func() error {
					after, err := scrapeOffload(metricsURL)
					if err != nil {
						return err
					}
					d = after.minus(before)
					if d.peerTx == 0 || d.peerRx < d.peerTx {
						return fmt.Errorf("peer counters %+v: echoes still coming", d)
					}
					return nil
				})
				c2p, p2c := float64(d.kernelC2P)/float64(d.peerTx), float64(d.kernelP2C)/float64(d.peerRx)
				t.Logf("%s via %s: relayed to peers %d, from peers %d; kernel client_to_peer %d (%.1f%%), peer_to_client %d (%.1f%%); kernel passed to sockets %d",
					what, via, d.peerTx, d.peerRx, d.kernelC2P, 100*c2p, d.kernelP2C, 100*p2c, d.passed)
				if c2p < offloadShare || p2c < offloadShare {
					t.Errorf("%s via %s: the kernel relayed %.1f%% and %.1f%% of the datagrams, want at least %.0f%%",
						what, via, 100*c2p, 100*p2c, 100*offloadShare)
				}
			}
			measure("pion", server, true, func() error {
				res, err := warmRelayRun(server, echo.ip, metricsURL, runClients, runPackets, listen)
				t.Logf("pion via %s from pod %s: %v", server, client, res)
				if err == nil && (res.lost() != 0 || res.sent != runClients*runPackets) {
					err = fmt.Errorf("%v, want every datagram back", res)
				}
				return err
			})
			// turnutils_uclient connect()s its socket to the server's address; on the
			// hostNetwork Gateway, whose listener is on the wildcard, the answers come from the
			// node address it sent to, not the cni0 address the route back to the pod picks
			// (udpio.SetPacketInfo).
			measure("turnutils_uclient", server, false, func() error {
				r := runUclientIn(clientPID, uclient, server, echo.ip)
				if r.err != nil {
					return fmt.Errorf("%v\n%s", r.err, r.out)
				}
				t.Logf("turnutils_uclient via %s from pod %s: sent %s, received %s, lost %s (%.1fs)", server, client, r.sent, r.recv, r.lost, r.took.Seconds())
				if r.lost != "0" || r.sent != r.recv || r.sent == "0" {
					return fmt.Errorf("sent %s, received %s, lost %s; want no loss", r.sent, r.recv, r.lost)
				}
				return nil
			})
			if g.ipv6 {
				relayIPv6(t, ternd, g.port, echo6, uclient, metricsURL, measure)
			}
			if g.revokeRoute != "" {
				revokeByRoute(t, server, g.revokeRoute, echo.ip, metricsURL, listen)
			}
		})
	}
}

// relayIPv6 is TestOffloadRelay over IPv6, on the pod network's dual-stack addresses: ternd's
// wildcard TURN-UDP listener (a dual-stack socket) at its pod's IPv6 address, an IPv6 relayed
// transport address on the same (the operator renders relay.address $(POD_IPS) on a dual-stack
// cluster), the echo pod's IPv6 address as the peer, and the clients in the control plane's
// network namespace: runClients raw TURN clients asking for an IPv6 relayed address with
// REQUESTED-ADDRESS-FAMILY (relay6Run), then turnutils_uclient with -x (the same attribute),
// each with no loss and at least offloadShare of the datagrams relayed by the kernel (measure).
func relayIPv6(t *testing.T, ternd pod, port int, echo6 netip.Addr, uclient, metricsURL string,
	measure func(what, via string, warmed bool, f func() error)) {
	t.Helper()
	ip6, err := ipv6Of(ternd)
	if err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(ip6, uint16(port))
	peer := netip.AddrPortFrom(echo6, echoPort)
	// The first allocation checks the way (the IPv6 EndpointSlice in ternd's peers) before
	// counting.
	testenv.Eventually(t, 60*time.Second, func() error {
		a, err := allocate6(server, ip6, peer, 0x4000)
		if err != nil {
			return err
		}
		defer a.Close()
		return a.echo([]byte("tern-ipv6"), 500*time.Millisecond)
	})
	measure("IPv6 TURN client (REQUESTED-ADDRESS-FAMILY IPv6)", server.String(), true, func() error {
		res, err := relay6Run(server, ip6, peer, metricsURL, runClients, runPackets)
		t.Logf("IPv6 TURN clients via %s to %v, relayed on %v: %v", server, peer, ip6, res)
		if err == nil && (res.lost() != 0 || res.sent != runClients*runPackets) {
			err = fmt.Errorf("%v, want every datagram back", res)
		}
		return err
	})
	measure("turnutils_uclient -x", server.String(), false, func() error {
		r := runUclientWith([]string{uclient, "-x"}, server.String(), echo6.String())
		if r.err != nil {
			return fmt.Errorf("%v\n%s", r.err, r.out)
		}
		t.Logf("turnutils_uclient -x via %s to %v: sent %s, received %s, lost %s (%.1fs)", server, peer, r.sent, r.recv, r.lost, r.took.Seconds())
		if r.lost != "0" || r.sent != r.recv || r.sent == "0" {
			return fmt.Errorf("sent %s, received %s, lost %s; want no loss", r.sent, r.recv, r.lost)
		}
		return nil
	})
}

// revokeByRoute is issue 25's revocation on the real node: a channel to the echo that the
// kernel relays, then the Gateway's UDPRoute pointed at a Service that does not exist, so the
// echo is no longer a peer of its cluster. The socket path's refusal (a CreatePermission for
// the echo answered 403 on a second allocation) and the kernel's (tern_offload_paths back to 0:
// every channel of that ternd is to the echo) come from one reconfiguration, which sets the
// listener's allowlist and then revokes the permissions and channels it no longer allows,
// taking their paths out of the kernel's maps (dataplane/reconfig.go, turn.Engine.Revalidate).
// Once both are seen, the ChannelData the first client sends next on its channel is refused:
// the kernel relays none of it (tern_offload_packets_total client_to_peer does not move), no
// datagram reaches a peer (tern_peer_packets_total tx does not move) and ternd counts each as
// dropped for no_channel. The two propagation times are logged, not asserted.
func revokeByRoute(t *testing.T, server, route, peerIP, metricsURL string, listen listenFunc) {
	t.Helper()
	a, err := allocateFrom(server, listen)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// pion binds the channel in the background after its first datagram: echo until one
	// goes through the kernel.
	testenv.Eventually(t, 30*time.Second, func() error {
		before, err := scrapeOffload(metricsURL)
		if err != nil {
			return err
		}
		if err := echoVia(a.relay, peerIP, 2*time.Second); err != nil {
			return err
		}
		after, err := scrapeOffload(metricsURL)
		if err != nil {
			return err
		}
		if d := after.minus(before); d.kernelC2P == 0 {
			return fmt.Errorf("route %s: the echo did not go through the kernel (yet): %+v", route, d)
		}
		return nil
	})
	probe, err := allocateFrom(server, listen)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	peer := &net.UDPAddr{IP: net.ParseIP(peerIP), Port: echoPort}
	if err := probe.client.CreatePermission(peer); err != nil {
		t.Fatalf("route %s: CreatePermission for %v before the change: %v", route, peer, err)
	}

	start := time.Now()
	kubectl(t, "-n", gatewayNamespace, "patch", "udproutes.stunner.l7mp.io", route, "--type=merge", "-p",
		`{"spec":{"rules":[{"backendRefs":[{"name":"offload-revoked","namespace":"media-plane"}]}]}}`)
	var refused, unpathed time.Duration
	for refused == 0 || unpathed == 0 {
		if refused == 0 {
			if err := probe.client.CreatePermission(peer); err != nil && strings.Contains(err.Error(), "403") {
				refused = time.Since(start)
			}
		}
		if unpathed == 0 {
			if paths, err := scrapeGauge(metricsURL, "tern_offload_paths"); err == nil && paths == 0 {
				unpathed = time.Since(start)
			}
		}
		if time.Since(start) > propagationBound {
			t.Fatalf("route %s: %v after the change, CreatePermission refused after %v, kernel paths gone after %v (0: not yet)",
				route, propagationBound, refused, unpathed)
		}
		time.Sleep(propagationProbe)
	}
	t.Logf("route %s: backend removed; CreatePermission refused (403) after %v, tern_offload_paths 0 after %v",
		route, refused.Round(time.Millisecond), unpathed.Round(time.Millisecond))

	const sends = 10
	noChannel := `tern_dropped_packets_total{reason="no_channel"}`
	before, err := scrapeOffload(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	dropsBefore, err := scrapeGauge(metricsURL, noChannel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sends {
		if _, err := a.relay.WriteTo([]byte("revoked-"+strconv.Itoa(i)), peer); err != nil {
			t.Fatalf("route %s: sending on the revoked channel: %v", route, err)
		}
	}
	var drops uint64
	testenv.Eventually(t, 10*time.Second, func() error {
		d, err := scrapeGauge(metricsURL, noChannel)
		if err != nil {
			return err
		}
		if drops = d - dropsBefore; drops < sends {
			return fmt.Errorf("%s went up by %d, want %d", noChannel, drops, sends)
		}
		return nil
	})
	after, err := scrapeOffload(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	d := after.minus(before)
	t.Logf("route %s: %d ChannelData sent on the revoked channel: dropped no_channel %d, kernel client_to_peer %d, relayed to peers %d",
		route, sends, drops, d.kernelC2P, d.peerTx)
	if d.kernelC2P != 0 || d.peerTx != 0 {
		t.Errorf("route %s: after the revocation the kernel relayed %d and ternd %d datagrams to peers, want 0", route, d.kernelC2P, d.peerTx)
	}
}

// listenInNetns opens a UDP socket in the network namespace of process pid (a pod's sandbox):
// a socket keeps the namespace it was made in, so pion's client then sends from the pod. The
// thread that enters the namespace is locked and, should it fail to come back, ends with its
// goroutine instead of serving other goroutines from the pod's namespace.
func listenInNetns(pid int) (net.PacketConn, error) {
	type result struct {
		conn net.PacketConn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		conn, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// runUclientIn is runUclient from the network namespace of process pid, stopped after 120 s.
func runUclientIn(pid int, uclient, server, echoIP string) uclientRun {
	return runUclientWith([]string{"timeout", "120", "nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "--", uclient}, server, echoIP)
}

// offloadCounts are the counters of one ternd that say how much its kernel relayed.
type offloadCounts struct {
	kernelC2P, kernelP2C uint64 // tern_offload_packets_total
	peerTx, peerRx       uint64 // tern_peer_packets_total: every datagram relayed, either path
	passed               uint64 // tern_offload_passed_packets_total, all reasons
}

func (a offloadCounts) minus(b offloadCounts) offloadCounts {
	return offloadCounts{a.kernelC2P - b.kernelC2P, a.kernelP2C - b.kernelP2C, a.peerTx - b.peerTx, a.peerRx - b.peerRx, a.passed - b.passed}
}

// scrapeOffload reads offloadCounts from a ternd's /metrics.
func scrapeOffload(url string) (offloadCounts, error) {
	var c offloadCounts
	body, err := httpGet(url)
	if err != nil {
		return c, err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseUint(line[i+1:], 10, 64)
		if err != nil {
			continue
		}
		switch series := line[:i]; {
		case series == `tern_offload_packets_total{direction="client_to_peer"}`:
			c.kernelC2P = v
		case series == `tern_offload_packets_total{direction="peer_to_client"}`:
			c.kernelP2C = v
		case series == `tern_peer_packets_total{direction="tx"}`:
			c.peerTx = v
		case series == `tern_peer_packets_total{direction="rx"}`:
			c.peerRx = v
		case strings.HasPrefix(series, "tern_offload_passed_packets_total{"):
			c.passed += v
		}
	}
	return c, sc.Err()
}

// httpGet returns the body of a GET of url, within 5 s.
func httpGet(url string) (string, error) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b.String(), nil
}

// warmRelayRun is relayRunFrom with every client's channel bound before the datagrams that
// count: pion sends a peer's first datagrams as Send indications while it binds a channel in
// the background, and only ChannelData is offloaded, so how many go unbound depends on how
// fast the binding comes back. Each client allocates and echoes once; once ternd's
// tern_offload_paths says the kernel holds every client's channel (the ChannelBind answers
// are sent), each echoes once more, which its read loop takes after the ChannelBind answer;
// then all send runPackets. The counters at metricsURL are read after the warm-up, so the
// offloadCounts measure takes for pion are those of the counted datagrams: warmRelayRun
// returns them through lastWarmCounts.
func warmRelayRun(server, peerIP, metricsURL string, clients, packets int, listen listenFunc) (runResult, error) {
	res := runResult{clients: clients}
	allocs := make([]*turnAlloc, 0, clients)
	defer func() {
		for _, a := range allocs {
			a.Close()
		}
	}()
	for range clients {
		a, err := allocateFrom(server, listen)
		if err != nil {
			return res, err
		}
		allocs = append(allocs, a)
		if err := echoVia(a.relay, peerIP, 2*time.Second); err != nil {
			return res, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		paths, err := scrapeGauge(metricsURL, "tern_offload_paths")
		if err == nil && paths >= uint64(clients) {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("tern_offload_paths %d (%v) 30s after %d clients bound a channel", paths, err, clients)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range allocs {
		if err := echoVia(a.relay, peerIP, 2*time.Second); err != nil {
			return res, err
		}
	}
	before, err := scrapeOffload(metricsURL)
	if err != nil {
		return res, err
	}
	lastWarmCounts = before
	return fanOut(len(allocs), func(id int) (int, int, error) {
		return relayOn(allocs[id], peerIP, uint32(id), packets)
	})
}

// lastWarmCounts are the counters warmRelayRun read after its warm-up.
var lastWarmCounts offloadCounts

// scrapeGauge reads the unlabelled series name from a ternd's /metrics.
func scrapeGauge(url, name string) (uint64, error) {
	body, err := httpGet(url)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, url)
}

// processStatus returns the Uid, Cap* and NoNewPrivs lines of /proc/<pid>/status of the one
// process named comm on the machine.
func processStatus(comm string) ([]string, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []string
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		c, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		st, err := os.ReadFile("/proc/" + d.Name() + "/status")
		if err != nil {
			continue
		}
		found = nil
		for _, line := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(line, "Uid:") || strings.HasPrefix(line, "Cap") || strings.HasPrefix(line, "NoNewPrivs:") {
				found = append(found, line)
			}
		}
		return found, nil
	}
	return nil, fmt.Errorf("no process %s", comm)
}
