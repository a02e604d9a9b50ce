//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway of TestConfigMapMode: its own class, GatewayConfig and Dataplane
// (configSource: ConfigMap), on the pod network, with a ClusterIP Service on a port of its own.
const (
	cmGateway  = "udp-configmap"
	cmSelector = "stunner.l7mp.io/related-gateway-name=" + cmGateway
	cmPort     = 3481
)

// cmManifests is the Gateway API side of TestConfigMapMode; %[1]s is the ternd image. Its
// routes are TestCDSRelay's: the media servers and the toggled-peer Service.
const cmManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: configmap-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: configmap-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: configmap-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: configmap
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: configmap}
spec:
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  configSource: ConfigMap
  terminationGracePeriodSeconds: 5
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-configmap
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: configmap-class
  listeners: [{name: udp-listener, port: 3481, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: configmap-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-configmap}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: configmap-toggled-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-configmap}]
  rules: [{backendRefs: [{name: toggled-peer, namespace: media-plane}]}]
`

// TestConfigMapMode keeps the opt-in on the real node: a Gateway whose Dataplane says
// configSource: ConfigMap gets pods that mount the Gateway's ConfigMap (-c the file,
// TERN_CONFIGMAP) and hold a ServiceAccount token (in the running container), with a Role
// that reads that one ConfigMap; turnutils_uclient and pion/turn relay through it with no
// loss, and EndpointSlice changes reach it through the ConfigMap watch (measured, as
// TestCDSRelay measures the service, for BENCHMARKS.md's comparison in the same run).
func TestConfigMapMode(t *testing.T) {
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
	kubectl(t, "apply", "-f", testdata("toggled-peer.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "deployment/bystander", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	bystander := runningPods(t, "media-plane", "app=bystander")[0]
	startPeer(t, dir, echo)
	startPeer(t, dir, bystander)

	manifests := []byte(fmt.Sprintf(cmManifests, importedImage(t, dir, "ternd")))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})

	var server string // ternd by its pod's address
	step("Token", func(t *testing.T) {
		start := time.Now()
		run(t, manifests, "kubectl", "apply", "-f", "-")
		var p pod
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, cmSelector)
			if err != nil || len(pods) != 1 {
				return fmt.Errorf("want one Ready ternd pod for the ConfigMap Gateway, have %v (%v)", pods, err)
			}
			p = pods[0]
			server = net.JoinHostPort(p.ip, strconv.Itoa(cmPort))
			return echoOnce(server, echo.ip, 500*time.Millisecond)
		})
		t.Logf("ConfigMap Gateway's ternd pod relaying %.2fs after kubectl apply (ternd at %s)", time.Since(start).Seconds(), server)

		args := kubectl(t, "-n", gatewayNamespace, "get", "deployment", cmGateway, "-o", "jsonpath={.spec.template.spec.containers[0].args[*]}")
		if !strings.HasSuffix(args, " -c /etc/tern/config/tern.yaml") {
			t.Errorf("args %q, want them to end in -c /etc/tern/config/tern.yaml", args)
		}
		env := kubectl(t, "-n", gatewayNamespace, "get", "deployment", cmGateway, "-o",
			`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="TERN_CONFIGMAP")].value}`)
		if env != cmGateway {
			t.Errorf("TERN_CONFIGMAP %q, want %q", env, cmGateway)
		}
		role := kubectl(t, "-n", gatewayNamespace, "get", "role", cmGateway, "-o", "jsonpath={.rules[*].resources} {.rules[*].resourceNames}")
		if role != `["configmaps"] ["`+cmGateway+`"]` {
			t.Errorf("Role %s grants %s, want configmaps [%s]", cmGateway, role, cmGateway)
		}
		kubectl(t, "-n", gatewayNamespace, "get", "rolebinding", cmGateway)
		got, err := clientset(t).CoreV1().Pods(p.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Spec.AutomountServiceAccountToken; a != nil && !*a {
			t.Errorf("pod %s: automountServiceAccountToken false in ConfigMap mode", p.name)
		}
		pid := containerPID(t, dir, p.name, "ternd")
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/root" + tokenDir + "/token"); err != nil {
			t.Errorf("ternd container of %s (pid %d): no ServiceAccount token: %v", p.name, pid, err)
		}
		t.Logf("pod %s: ServiceAccount token at %s, Role %s for ConfigMap %s", p.name, tokenDir, cmGateway, cmGateway)
	})

	step("Relay", func(t *testing.T) {
		ip := strings.TrimSpace(kubectl(t, "-n", gatewayNamespace, "get", "service", cmGateway, "-o", "jsonpath={.spec.clusterIP}"))
		checkRelay(t, uclient, echo.ip, server, net.JoinHostPort(ip, strconv.Itoa(cmPort)))
	})

	step("ConfigPropagation", func(t *testing.T) {
		adds, removals := measurePropagation(t, server, bystander, propagationChanges)
		t.Logf("config propagation through the ConfigMap, EndpointSlice write to the new peer relayable: %s", summary(adds))
		t.Logf("config propagation through the ConfigMap, EndpointSlice write to the removed peer cut off: %s", summary(removals))
	})
}
