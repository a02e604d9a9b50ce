//go:build cluster

package cluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// cpuManifests: two Gateways on the pod network with the same ternd, one under the chart's
// default Dataplane (the offload on after TestOffloadCPU's Helm upgrade), one under a Dataplane
// with offloadEngine None. %[1]s is the ternd image.
const cpuManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: cpu-on-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: cpu-on-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: cpu-on-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-cpu-on
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: cpu-on-class
  listeners: [{name: udp-listener, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: cpu-on-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-cpu-on}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: cpu-off-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: cpu-off-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: cpu-off-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: cpu-off
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: cpu-off}
spec:
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  enableMetricsEndpoint: true
  offloadEngine: None
  terminationGracePeriodSeconds: 5
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-cpu-off
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: cpu-off-class
  listeners: [{name: udp-listener, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: cpu-off-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-cpu-off}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
`

// TestOffloadCPU is a measurement, not a check, and runs only when TERN_OFFLOAD_CPU names a
// ternbench binary (make cluster-e2e leaves it unset): the node-wide CPU per relayed packet
// of a pod-network Gateway with the offload on against one with it off, at the same load.
// ternbench's webrtc profile runs in the media-server pod's network namespace, its clients
// and its peer (the SFU) on that pod's address, which the Gateways' routes admit; its
// targets are the two ternd pods, measured in turn, and "direct" (the generator alone) is the
// baseline it subtracts. The nodes share this machine's kernel, so /proc/stat, which
// ternbench reads, is every node's CPU. TERN_OFFLOAD_CPU_ARGS replaces the profile's
// arguments (default "-allocations 1000 -duration 20s"). The table and the load average
// before and after are logged; the figures go to BENCHMARKS.md.
func TestOffloadCPU(t *testing.T) {
	ternbench := os.Getenv("TERN_OFFLOAD_CPU")
	if ternbench == "" {
		t.Skip("a measurement: TERN_OFFLOAD_CPU=<ternbench binary> runs it")
	}
	ternbench, err := filepath.Abs(ternbench)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(os.Getenv("TERN_OFFLOAD_CPU_ARGS"))
	if len(args) == 0 {
		args = []string{"-allocations", "1000", "-duration", "20s"}
	}
	dir := cluster(t)
	tag := installOperator(t)
	root := repoRoot(t)
	testdata := func(name string) string { return root + "/test/cluster/testdata/" + name }
	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]

	vals := chartValues(tag, false)
	vals["dataplane"].(map[string]any)["offloadEngine"] = "Auto"
	helmUpgrade(t, vals)
	t.Cleanup(func() { helmUpgrade(t, chartValues(tag, false)) })
	manifests := []byte(fmt.Sprintf(cpuManifests, importedImage(t, dir, "ternd")))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	run(t, manifests, "kubectl", "apply", "-f", "-")

	var targets []string
	for _, g := range []struct{ name, active string }{{"udp-cpu-on", "True"}, {"udp-cpu-off", "False"}} {
		var ternd pod
		testenv.Eventually(t, 180*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, "stunner.l7mp.io/related-gateway-name="+g.name)
			if err != nil || len(pods) != 1 {
				return fmt.Errorf("want one Ready ternd pod of %s, have %v (%v)", g.name, pods, err)
			}
			ternd = pods[0]
			return nil
		})
		testenv.Eventually(t, 120*time.Second, func() error {
			st := kubectl(t, "-n", gatewayNamespace, "get", "gateway", g.name, "-o",
				`jsonpath={.status.conditions[?(@.type=="OffloadActive")].status} {.status.conditions[?(@.type=="OffloadActive")].reason}`)
			if !strings.HasPrefix(st, g.active+" ") {
				return fmt.Errorf("Gateway %s OffloadActive %q, want %s", g.name, st, g.active)
			}
			t.Logf("%s: pod %s, OffloadActive %s", g.name, ternd, st)
			return nil
		})
		name := strings.TrimPrefix(g.name, "udp-cpu-")
		tpid, err := processInNetns("ternd", sandboxPID(t, dir, ternd.name))
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, "-t", name+"="+net.JoinHostPort(ternd.ip, "3478")+",pid="+strconv.Itoa(tpid)+",user=user-1,pass=pass-1")
	}

	uptime := func() string {
		b, _ := os.ReadFile("/proc/loadavg")
		return strings.TrimSpace(string(b))
	}
	pid := sandboxPID(t, dir, echo.name)
	inPod := []string{"nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "--"}
	// ternd takes at most 200 allocations from one client IP (limits.allocationsPerIP, which
	// the operator does not render): the clients take the pod's address and four more of its
	// node's pod subnet that no pod gets (host-local assigns from the bottom of the range).
	clientIPs := []string{echo.ip}
	ip := net.ParseIP(echo.ip).To4()
	for i := range 4 {
		extra := net.IPv4(ip[0], ip[1], ip[2], byte(240+i)).String()
		run(t, nil, inPod[0], append(inPod[1:], "ip", "addr", "add", extra+"/32", "dev", "eth0")...)
		clientIPs = append(clientIPs, extra)
	}
	out := filepath.Join(t.TempDir(), "webrtc.json")
	cmd := append(append(inPod, ternbench, "webrtc",
		"-client-ip", strings.Join(clientIPs, ","), "-peer-ip", echo.ip, "-progress", "off", "-o", out), targets...)
	cmd = append(cmd, args...)
	t.Logf("load average before: %s", uptime())
	t.Logf("running %s", strings.Join(cmd, " "))
	res, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	t.Logf("load average after: %s", uptime())
	t.Logf("ternbench:\n%s", res)
	if err != nil {
		t.Fatalf("ternbench: %v", err)
	}
	if b, err := os.ReadFile(out); err == nil {
		t.Logf("results JSON:\n%s", b)
	}
}

// processInNetns returns the PID of the process named comm in the network namespace of
// process pid (a pod's sandbox): ternbench reads its CPU time from /proc/<PID>/stat.
func processInNetns(comm string, pid int) (int, error) {
	want, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return 0, err
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if ns, err := os.Readlink("/proc/" + d.Name() + "/ns/net"); err == nil && ns == want {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no process %s in the network namespace of pid %d (%s)", comm, pid, want)
}
