//go:build cluster

package cluster

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// The DaemonSet Gateway of TestDaemonSetRelay: its own class, GatewayConfig and Dataplane, on
// a port of its own so that it never meets TestTURNRelay's Gateway on the node's network.
const (
	dsGateway  = "udp-daemonset"
	dsSelector = "stunner.l7mp.io/related-gateway-name=" + dsGateway
	dsPort     = 3479
)

// dsManifests is the Gateway API side of TestDaemonSetRelay; %[1]s is the ternd image. The
// Dataplane says dataplaneResource: DaemonSet on hostNetwork, as STUNner's premium DaemonSet
// dataplanes run: one ternd per node, on the node's address.
const dsManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: daemonset-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: daemonset-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: daemonset-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: daemonset
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: daemonset}
spec:
  dataplaneResource: DaemonSet
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16, --legacy-channel-numbers]
  hostNetwork: true
  terminationGracePeriodSeconds: 5
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-daemonset
  namespace: stunner
  labels: {team: media}
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: daemonset-class
  listeners: [{name: udp-listener, port: 3479, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: daemonset-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-daemonset}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// TestDaemonSetRelay is issue 20's DaemonSet dataplane on the real nodes: a Gateway whose
// Dataplane says dataplaneResource: DaemonSet gets a DaemonSet and no Deployment, carrying the
// Gateway's labels, STUNner's owned-by label and STUNNER_* environment; one ternd pod runs on
// each node's network, and turnutils_uclient and pion/turn relay through it to the echo pod
// behind the UDPRoute with no loss, by a node's address and through the Gateway's Service; on
// three nodes or more, a pion/turn client in one node's network namespace relays through the
// ternd pod of a second node to the echo pod on a third (checkCrossNodeRelay).
// The Dataplane switched to Deployment replaces the DaemonSet by a Deployment whose pod
// relays too; deleting the Gateway removes them all. Both kinds' pods take their config from
// the config discovery service with no ServiceAccount token (checkCDSMode).
func TestDaemonSetRelay(t *testing.T) {
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
	testdata := func(name string) string { return root + "/test/cluster/testdata/" + name }
	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	startPeer(t, dir, echo)

	manifests := []byte(fmt.Sprintf(dsManifests, importedImage(t, dir, "ternd")))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	var nodeServer string // a ternd pod by its node's address
	var dsPods []pod      // the DaemonSet's pods, one per node

	step("DaemonSet", func(t *testing.T) {
		nodes := clusterNodes(t)
		start := time.Now()
		run(t, manifests, "kubectl", "apply", "-f", "-")
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, dsSelector)
			if err != nil || len(pods) != len(nodes) {
				return fmt.Errorf("want a Ready ternd pod on each of the %d nodes, have %v (%v)", len(nodes), pods, err)
			}
			on := map[string]bool{}
			for _, p := range pods {
				if p.ip != p.hostIP || on[p.node] {
					return fmt.Errorf("want one Ready ternd pod per node, on its node's address, have %v", pods)
				}
				on[p.node] = true
			}
			for _, p := range pods {
				if err := echoOnce(net.JoinHostPort(p.ip, strconv.Itoa(dsPort)), echo.ip, 500*time.Millisecond); err != nil {
					return err
				}
			}
			dsPods = pods
			return nil
		})
		nodeServer = net.JoinHostPort(dsPods[0].ip, strconv.Itoa(dsPort))
		t.Logf("DaemonSet's %d ternd pods relaying %.1fs after kubectl apply", len(dsPods), time.Since(start).Seconds())
		for _, p := range runningPods(t, gatewayNamespace, dsSelector) {
			checkCDSMode(t, dir, p, "daemonset", dsGateway)
		}
		if out := kubectl(t, "-n", gatewayNamespace, "get", "deployments", "-l", dsSelector, "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("a DaemonSet Gateway has a Deployment too: %s", out)
		}
		labels := kubectl(t, "-n", gatewayNamespace, "get", "daemonset", dsGateway, "-o", "jsonpath={.metadata.labels}")
		for _, want := range []string{`"team":"media"`, `"stunner.l7mp.io/owned-by":"stunner"`} {
			if !strings.Contains(labels, want) {
				t.Errorf("DaemonSet labels %s lack %s", labels, want)
			}
		}
		env := kubectl(t, "-n", gatewayNamespace, "get", "daemonset", dsGateway, "-o", "jsonpath={.spec.template.spec.containers[0].env[*].name}")
		for _, want := range []string{"STUNNER_ADDR", "STUNNER_NAME", "STUNNER_NAMESPACE", "STUNNER_NODENAME", "STUNNER_CONFIG_ORIGIN"} {
			if !strings.Contains(" "+env+" ", " "+want+" ") {
				t.Errorf("DaemonSet pods' environment %q lacks %s", env, want)
			}
		}
	})

	step("Relay", func(t *testing.T) {
		checkRelay(t, uclient, echo.ip, nodeServer, dsServiceServer(t))
	})

	// Across three nodes: the client in one node's network namespace, the ternd pod of a
	// second node by that node's address, the echo pod on the third.
	step("CrossNode", func(t *testing.T) {
		checkCrossNodeRelay(t, dir, dsPods, echo)
	})

	// The Dataplane switched to a Deployment: the operator deletes the DaemonSet, and the
	// Deployment's pod (the node's port free once the DaemonSet's pod has drained its grace
	// period) relays.
	step("SwitchToDeployment", func(t *testing.T) {
		var dsEnds []<-chan podEnd
		for _, p := range dsPods {
			dsEnds = append(dsEnds, watchPodEnd(t, p))
		}
		kubectl(t, "patch", "dataplane", "daemonset", "--type=merge", "-p", `{"spec":{"dataplaneResource":"Deployment"}}`)
		testenv.Eventually(t, 120*time.Second, func() error {
			out, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "daemonsets,deployments", "-l", dsSelector, "-o", "name")
			if err != nil || strings.TrimSpace(out) != "deployment.apps/"+dsGateway {
				return fmt.Errorf("the Gateway's workloads: %q (%v), want its Deployment alone", out, err)
			}
			return nil
		})
		deadline := time.After(5*time.Second + 60*time.Second)
		for i, dsEnd := range dsEnds {
			select {
			case _, ok := <-dsEnd:
				if !ok {
					t.Fatalf("the DaemonSet's pod %s still there 5 minutes after the switch", dsPods[i].name)
				}
			case <-deadline:
				t.Fatalf("the DaemonSet's pod %s still there a minute past its grace period after the switch", dsPods[i].name)
			}
		}
		old := map[string]bool{}
		for _, p := range dsPods {
			old[p.name] = true
		}
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, dsSelector)
			if err != nil || len(pods) != 1 || pods[0].ip != pods[0].hostIP || old[pods[0].name] {
				return fmt.Errorf("want the Deployment's Ready ternd pod on its node's address, have %v (%v)", pods, err)
			}
			nodeServer = net.JoinHostPort(pods[0].ip, strconv.Itoa(dsPort))
			return echoOnce(nodeServer, echo.ip, 500*time.Millisecond)
		})
		checkCDSMode(t, dir, runningPods(t, gatewayNamespace, dsSelector)[0], "deployment", dsGateway)
		checkPionRun(t, nodeServer, echo.ip)
	})

	step("GatewayDeleted", func(t *testing.T) {
		pods := runningPods(t, gatewayNamespace, dsSelector)
		kubectl(t, "-n", gatewayNamespace, "delete", "gateway", dsGateway, "--wait=false")
		testenv.Eventually(t, 30*time.Second, func() error {
			out, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "daemonsets,deployments,services,configmaps", "-l", dsSelector, "-o", "name")
			if err != nil || strings.TrimSpace(out) != "" {
				return fmt.Errorf("left after deleting the Gateway: %q (%v)", out, err)
			}
			return nil
		})
		// Its pod gone too (within its grace period and the kubelet's bookkeeping), so the
		// node's ports are free for the tests after this one.
		for _, p := range pods {
			select {
			case _, ok := <-watchPodEnd(t, p):
				if !ok {
					t.Fatalf("ternd pod %s still there 5 minutes after the Gateway's deletion", p.name)
				}
			case <-time.After(65 * time.Second):
				t.Fatalf("ternd pod %s still there a minute past its grace period after the Gateway's deletion", p.name)
			}
		}
	})
}

// dsServiceServer returns the TURN address of the DaemonSet Gateway's ClusterIP Service.
func dsServiceServer(t *testing.T) string {
	t.Helper()
	ip := strings.TrimSpace(kubectl(t, "-n", gatewayNamespace, "get", "service", dsGateway, "-o", "jsonpath={.spec.clusterIP}"))
	if net.ParseIP(ip) == nil {
		t.Fatalf("Service %s/%s has no ClusterIP: %q", gatewayNamespace, dsGateway, ip)
	}
	return net.JoinHostPort(ip, strconv.Itoa(dsPort))
}
