//go:build cluster

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	stun3 "github.com/pion/stun/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway TestDaemonSetUpgrade upgrades, and its load: upClients pion/turn clients,
// spread over the nodes, each relaying upRate datagrams a second to the echo pod.
const (
	upGateway  = "udp-upgrade"
	upSelector = "stunner.l7mp.io/related-gateway-name=" + upGateway
	upPort     = 3482
	upDTLSPort = 3483
	// upDTLSClients of the clients allocate over TURN-DTLS (issue 27: the associations move
	// too), the others over TURN-UDP.
	upDTLSClients = 6
	upClients     = 20
	upRate        = 50
	// The most of the datagrams sent across the upgrade that may be lost (issue 27).
	upMaxLoss = 0.001
	// The tag the test gives the images it upgrades to: the same images as the installed
	// tag's, under a second tag (ctr images tag on each node), as a registry would hold a
	// release's next version.
	upNextSuffix = "-next"
)

// upManifests is the Gateway API side of TestDaemonSetUpgrade: a class whose GatewayConfig
// uses the chart's Dataplane "default", which the test's values make a DaemonSet on
// hostNetwork.
const upManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: upgrade-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: upgrade-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: upgrade-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: default
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-upgrade
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: upgrade-class
  listeners:
  - {name: udp-listener, port: 3482, protocol: TURN-UDP}
  - name: dtls-listener
    port: 3483
    protocol: TURN-DTLS
    tls: {mode: Terminate, certificateRefs: [{kind: Secret, name: upgrade-dtls-tls}]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: upgrade-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-upgrade}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// upgradeValues are the chart values of TestDaemonSetUpgrade at tag: chartValues on
// hostNetwork, the default Dataplane a DaemonSet.
func upgradeValues(tag string) map[string]any {
	v := chartValues(tag, true)
	v["dataplane"].(map[string]any)["extraSpec"] = map[string]any{"dataplaneResource": "DaemonSet"}
	if engine := os.Getenv("TERN_UPGRADE_OFFLOAD"); engine != "" {
		v["dataplane"].(map[string]any)["offloadEngine"] = engine
	}
	return v
}

// upLoad returns how many clients TestDaemonSetUpgrade runs and how many datagrams a second
// each sends: upClients and upRate, or what TERN_UPGRADE_LOAD ("clients,rate") asks for in a
// run by hand (BENCHMARKS.md: "100,100" is issue 27's 20,000 datagrams/s relayed in all).
func upLoad(t *testing.T) (clients, rate int) {
	v := os.Getenv("TERN_UPGRADE_LOAD")
	if v == "" {
		return upClients, upRate
	}
	c, r, ok := strings.Cut(v, ",")
	var err1, err2 error
	clients, err1 = strconv.Atoi(c)
	rate, err2 = strconv.Atoi(r)
	if !ok || err1 != nil || err2 != nil || clients < 1 || rate < 1 {
		t.Fatalf("TERN_UPGRADE_LOAD=%q: want clients,rate (positive integers)", v)
	}
	return clients, rate
}

// offloadPackets returns the kernel's relayed datagrams, both directions, of p's ternd (its
// node's metrics port).
func offloadPackets(p pod) (uint64, error) {
	url := "http://" + net.JoinHostPort(p.ip, "8080") + "/metrics"
	var sum uint64
	for _, d := range []string{"client_to_peer", "peer_to_client"} {
		v, err := scrapeSample(url, `tern_offload_packets_total{direction="`+d+`"}`)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// TestDaemonSetUpgrade is issue 27's upgrade of a DaemonSet Gateway on the real nodes, the way
// a user does it: `helm upgrade` with a new image tag. The chart's default Dataplane is a
// DaemonSet on hostNetwork, which tern-operator renders to hand over (maxSurge 1,
// maxUnavailable 0, --takeover-or-start, --after-handover=wait, the hand-over socket on a
// hostPath, no container ports). upClients pion/turn clients hold allocations on the pods of
// every node and relay upRate datagrams a second each to the echo pod through the upgrade.
// Then:
//   - the DaemonSet's pods all run the new tag and are Ready, one per node, and the old pods
//     are gone (the surge pod was scheduled beside the old one: no host port collides);
//   - each new pod took its node's allocations over (its log says so, and its
//     stunner_allocations_active counts its node's clients);
//   - no allocation is lost: each client refreshes (Refresh, 200) and relays through the new
//     pod;
//   - of the datagrams sent across the upgrade at most upMaxLoss are lost; the loss, how long
//     each old pod stopped reading, and the longest gap a client saw between two echoes are
//     logged.
func TestDaemonSetUpgrade(t *testing.T) {
	tag := installOperator(t)
	dir := cluster(t)
	root := repoRoot(t)
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
	nodes := clusterNodes(t)

	// The next version: the same images under a second tag on every node.
	next := tag + upNextSuffix
	for _, sock := range containerdSockets(t, dir) {
		for _, repo := range []string{"ghcr.io/tern-gw/ternd", "ghcr.io/tern-gw/tern-operator"} {
			ctr(t, sock, "images", "tag", "--force", repo+":"+tag, repo+":"+next)
		}
	}

	offload := os.Getenv("TERN_UPGRADE_OFFLOAD") != ""
	manifests := []byte(upManifests)
	t.Cleanup(func() {
		// The chart's defaults again, for the tests after this one.
		helmUpgrade(t, chartValues(tag, false))
	})
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	// The TURN-DTLS listener's certificate.
	certDir := t.TempDir()
	cert, key, err := selfsigned.Write(filepath.Join(certDir, "dtls"), "turn.example.com", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secret := kubectl(t, "-n", gatewayNamespace, "create", "secret", "tls", "upgrade-dtls-tls", "--cert", cert, "--key", key,
		"--dry-run=client", "-o", "yaml")
	run(t, []byte(secret), "kubectl", "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = tryRun(nil, "kubectl", "-n", gatewayNamespace, "delete", "secret", "upgrade-dtls-tls", "--ignore-not-found", "--wait=false")
	})
	helmUpgrade(t, upgradeValues(tag))
	run(t, manifests, "kubectl", "apply", "-f", "-")

	var before []pod
	step("DaemonSet", func(t *testing.T) {
		testenv.Eventually(t, 180*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, upSelector)
			if err != nil || len(pods) != len(nodes) {
				return fmt.Errorf("want a Ready ternd pod on each of the %d nodes, have %v (%v)", len(nodes), pods, err)
			}
			for _, p := range pods {
				if err := echoOnce(net.JoinHostPort(p.ip, strconv.Itoa(upPort)), echo.ip, 500*time.Millisecond); err != nil {
					return err
				}
			}
			before = pods
			return nil
		})
		ds := func(path string) string {
			return kubectl(t, "-n", gatewayNamespace, "get", "daemonset", upGateway, "-o", "jsonpath={"+path+"}")
		}
		for path, want := range map[string]string{
			".spec.updateStrategy.rollingUpdate.maxSurge":                      "1",
			".spec.updateStrategy.rollingUpdate.maxUnavailable":                "0",
			".spec.template.spec.containers[0].ports":                          "",
			".spec.template.spec.initContainers[0].name":                       "handover",
			".spec.template.spec.volumes[?(@.name=='handover')].hostPath.path": "/run/tern/" + gatewayNamespace + "/" + upGateway,
		} {
			if got := ds(path); got != want {
				t.Errorf("DaemonSet %s = %q, want %q", path, got, want)
			}
		}
		for _, p := range before {
			initLog := kubectl(t, "-n", gatewayNamespace, "logs", p.name, "-c", "handover")
			// ternd's user owns it: 65532, or root where the offload's pod runs as root.
			wantInit := "hand-over directory /run/tern ready (owner 65532:65532, mode 0700)"
			if offload {
				wantInit = "hand-over directory /run/tern ready (owner 0:65532, mode 0700)"
			}
			if !strings.Contains(initLog, wantInit) {
				t.Errorf("%s: the init container's log: %q", p, initLog)
			}
			log := kubectl(t, "-n", gatewayNamespace, "logs", p.name, "-c", "ternd")
			for _, want := range []string{"no ternd to take over from; starting", "hand-over socket", "/run/tern/ternd.sock"} {
				if !strings.Contains(log, want) {
					t.Errorf("%s: ternd's log lacks %q:\n%s", p, want, log)
				}
			}
		}
	})

	// Each old pod's log, followed until the pod is gone: what it logs when it hands over.
	oldLogs := map[string]*daemon{}
	for _, p := range before {
		oldLogs[p.node] = startDaemon(t, nil, "kubectl logs "+p.name, "kubectl", "-n", gatewayNamespace, "logs", "-f", p.name, "-c", "ternd")
	}

	nClients, rate := upLoad(t)
	kernelBefore := map[string]uint64{}
	var clients []*loadClient
	t.Cleanup(func() {
		for _, c := range clients {
			c.release()
		}
	})
	perNode := map[string]int{}
	step("load", func(t *testing.T) {
		nDTLS := min(nClients, max(upDTLSClients, nClients/10))
		for i := range nClients {
			p := before[i%len(before)]
			var c *loadClient
			var err error
			if i < nDTLS {
				server := net.JoinHostPort(p.ip, strconv.Itoa(upDTLSPort))
				var a *turnAlloc
				if a, err = allocateDTLS(server); err == nil {
					c = startLoadOn(a, server, p, echo.ip, uint32(i), rate)
				}
			} else {
				c, err = startLoadAt(net.JoinHostPort(p.ip, strconv.Itoa(upPort)), p, echo.ip, uint32(i), rate)
			}
			if err != nil {
				t.Fatalf("client %d on %s: %v", i, p, err)
			}
			clients = append(clients, c)
			perNode[p.node]++
		}
		t.Logf("%d clients over TURN-DTLS, %d over TURN-UDP", nDTLS, nClients-nDTLS)
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, c := range clients {
				if _, got := c.counts(); got < rate {
					return fmt.Errorf("client %d on %s: %d echoes so far", c.id, c.on, got)
				}
			}
			return nil
		})
		for _, p := range before {
			if err := waitAllocations(p, perNode[p.node]); err != nil {
				t.Fatal(err)
			}
			if offload {
				n, err := offloadPackets(p)
				if err != nil {
					t.Fatal(err)
				}
				kernelBefore[p.node] = n
				t.Logf("node %s: the old pod's kernel relayed %d datagrams before the upgrade", p.node, n)
			}
		}
	})

	var after []pod
	step("helm upgrade", func(t *testing.T) {
		start := time.Now()
		helmUpgrade(t, upgradeValues(next))
		t.Logf("helm upgrade to %s: deployed after %.1fs", next, time.Since(start).Seconds())
		oldNames := map[string]bool{}
		for _, p := range before {
			oldNames[p.name] = true
		}
		testenv.Eventually(t, 300*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, upSelector)
			if err != nil {
				return err
			}
			all, _ := listPods(gatewayNamespace, upSelector, func(*corev1.Pod) bool { return true })
			for _, p := range all {
				if oldNames[p.name] {
					return fmt.Errorf("old pod %s still there", p)
				}
			}
			if len(pods) != len(nodes) || len(all) != len(nodes) {
				return fmt.Errorf("want one Ready pod per node, have %v Ready of %v", pods, all)
			}
			for _, p := range pods {
				img := kubectl(t, "-n", gatewayNamespace, "get", "pod", p.name, "-o", "jsonpath={.spec.containers[0].image}")
				if !strings.HasSuffix(img, ":"+next) {
					return fmt.Errorf("pod %s runs %s", p, img)
				}
			}
			after = pods
			return nil
		})
		t.Logf("DaemonSet rolled to %s on %d nodes, old pods gone, %.1fs after helm upgrade began", next, len(nodes), time.Since(start).Seconds())
		time.Sleep(3 * time.Second) // load after the switch: not an assertion
	})

	step("no allocation lost", func(t *testing.T) {
		var sent, received int
		var maxGap time.Duration
		for _, c := range clients {
			s, r := c.finish()
			sent, received = sent+s, received+r
			c.mu.Lock()
			maxGap = max(maxGap, c.maxGap)
			c.mu.Unlock()
		}
		for _, p := range after {
			log := kubectl(t, "-n", gatewayNamespace, "logs", p.name, "-c", "ternd")
			imported := logValue(log, "hand-over: imported", "allocations=")
			age := logValue(log, "hand-over: imported", "snapshotAge=")
			paused := "?"
			if d := oldLogs[p.node]; d != nil {
				paused = logValue(d.out.String(), "handed over to the successor", "paused=")
			}
			t.Logf("node %s: the new pod %s imported %s allocations (snapshot %s old when imported); the old pod stopped reading for %s",
				p.node, p.name, imported, age, paused)
			if !strings.Contains(log, "took over") {
				t.Errorf("%s did not take over:\n%s", p, log)
			}
			if err := waitAllocations(p, perNode[p.node]); err != nil {
				t.Error(err)
			}
			if offload {
				// The counter is carried over from the old pod: it goes on climbing only if
				// the kernel relayed through the switch and after it.
				n, err := offloadPackets(p)
				t.Logf("node %s: the kernel relayed %d datagrams by the end (%d before the upgrade)", p.node, n, kernelBefore[p.node])
				if err != nil || n <= kernelBefore[p.node] {
					t.Errorf("node %s: tern_offload_packets_total %d (%v), want more than the %d before the upgrade", p.node, n, err, kernelBefore[p.node])
				}
			}
		}
		loss := float64(sent-received) / float64(sent)
		t.Logf("upgrade under load (%d clients x %d datagrams/s): %d datagrams sent, %d echoed back, %d lost (%.3f%%); longest gap between two echoes of a client %v",
			nClients, rate, sent, received, sent-received, 100*loss, maxGap.Round(time.Millisecond))
		if loss > upMaxLoss {
			t.Errorf("loss across the upgrade %.3f%%, want at most %.1f%%", 100*loss, 100*upMaxLoss)
		}
		for _, c := range clients {
			server := c.server
			if err := refreshAlloc(c.a, server); err != nil {
				t.Errorf("client %d (server %s, node %s): Refresh after the upgrade: %v", c.id, server, c.on.node, err)
			}
			if err := echoVia(c.a.relay, echo.ip, 2*time.Second); err != nil {
				t.Errorf("client %d (server %s, node %s): relay after the upgrade: %v", c.id, server, c.on.node, err)
			}
		}
	})
}

// waitAllocations waits until p's ternd (its node's metrics port) has want allocations.
func waitAllocations(p pod, want int) error {
	url := "http://" + net.JoinHostPort(p.ip, "8080") + "/metrics"
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := scrapeSample(url, "stunner_allocations_active")
		if err == nil && int(got) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: stunner_allocations_active %d (%v), want %d", p, got, err, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logValue returns the value of key (with its "=") on the first line of log containing
// needle, or "?".
func logValue(log, needle, key string) string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, needle) {
			continue
		}
		if _, v, ok := strings.Cut(line, " "+key); ok {
			v, _, _ = strings.Cut(v, " ")
			return v
		}
	}
	return "?"
}

// refreshAlloc sends a Refresh (LIFETIME 600) for a's allocation to server through a's pion
// client, answering the 401 or 438 with the credentials, and returns an error unless it
// succeeds (RFC 8656 §7.2).
func refreshAlloc(a *turnAlloc, server string) error {
	to, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		return err
	}
	var nonce stun3.Nonce
	var realm stun3.Realm
	for range 4 {
		setters := []stun3.Setter{stun3.TransactionID, stun3.NewType(stun3.MethodRefresh, stun3.ClassRequest),
			stun3.RawAttribute{Type: stun3.AttrLifetime, Value: []byte{0, 0, 0x02, 0x58}}}
		if nonce != nil {
			setters = append(setters, stun3.NewUsername(turnUser), realm, nonce, stun3.NewLongTermIntegrity(turnUser, realm.String(), turnPass))
		}
		setters = append(setters, stun3.Fingerprint)
		msg, err := stun3.Build(setters...)
		if err != nil {
			return err
		}
		res, err := a.client.PerformTransaction(msg, to, false)
		if err != nil {
			return err
		}
		m := res.Msg
		if m.Type.Class == stun3.ClassSuccessResponse {
			return nil
		}
		var code stun3.ErrorCodeAttribute
		if err := code.GetFrom(m); err == nil && (code.Code == stun3.CodeUnauthorized && nonce == nil || code.Code == stun3.CodeStaleNonce) {
			if err := nonce.GetFrom(m); err != nil {
				return fmt.Errorf("%v without NONCE", code)
			}
			if err := realm.GetFrom(m); err != nil && realm == nil {
				return fmt.Errorf("%v without REALM", code)
			}
			continue
		}
		return fmt.Errorf("Refresh: %v", m)
	}
	return errors.New("Refresh: still asked for a nonce after 4 tries")
}

// allocateDTLS makes a pion/turn client over TURN-DTLS to server (the test's own self-signed
// certificate: not verified) and allocates.
func allocateDTLS(server string) (*turnAlloc, error) {
	raddr, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, err := dtls.DialWithContext(ctx, "udp4", raddr, &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // the test's self-signed certificate
	if err != nil {
		return nil, fmt.Errorf("DTLS to %s: %w", server, err)
	}
	return allocateOn(dtlsPacketConn{dc}, server)
}

// dtlsPacketConn is a DTLS association as the net.PacketConn a pion/turn client reads and
// writes: every datagram is from and to the server.
type dtlsPacketConn struct{ *dtls.Conn }

func (c dtlsPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.Read(b)
	return n, c.RemoteAddr(), err
}

func (c dtlsPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.Write(b) }
