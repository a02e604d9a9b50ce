//go:build cluster

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway of TestCDSRelay: its own class, GatewayConfig and Dataplane (no configSource:
// CDS, the default), on the pod network, with a ClusterIP Service on a port of its own.
const (
	cdsGateway       = "udp-cds"
	cdsSelector      = "stunner.l7mp.io/related-gateway-name=" + cdsGateway
	cdsPort          = 3480
	cdsService       = "stunner-config-discovery" // the chart's, in releaseNamespace
	operatorSelector = "app.kubernetes.io/name=tern-operator"
	// tokenDir is where the kubelet mounts a ServiceAccount token into a container.
	tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// cdsManifests is the Gateway API side of TestCDSRelay; %[1]s is the ternd image. The routes
// are those of TestTURNRelay's Gateway: the media servers, and the selectorless toggled-peer
// Service whose EndpointSlice measurePropagation writes. The Dataplane says nothing of where
// its config comes from: the operator renders -c with the ClusterIP of the Service
// stunner-config-discovery, which the cluster of hack/cluster.sh, running no DNS server, needs.
const cdsManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: cds-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: cds-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: cds-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: cds
  authRef: {name: stunner-auth-secret, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: cds}
spec:
  image: %[1]s
  imagePullPolicy: Never
  command: [ternd]
  args: [-w, --udp-thread-num=16]
  terminationGracePeriodSeconds: 5
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: udp-cds
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP}
spec:
  gatewayClassName: cds-class
  listeners: [{name: udp-listener, port: 3480, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: cds-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-cds}]
  rules: [{backendRefs: [{name: media-server-pool, namespace: media-plane}]}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: cds-toggled-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-cds}]
  rules: [{backendRefs: [{name: toggled-peer, namespace: media-plane}]}]
`

// TestCDSRelay is issue 24 on the real node: a Gateway whose Dataplane says nothing of its
// config source gets pods with no ServiceAccount token (none in the pod spec, nothing at
// tokenDir in the running container) and no Role or RoleBinding, whose ternd takes its config
// from tern-operator's config discovery service (the chart's Service stunner-config-discovery,
// by its ClusterIP);
// turnutils_uclient and pion/turn relay through it with no loss; EndpointSlice changes reach it
// through the service (measured as TestTURNRelay measures the ConfigMap path, for
// BENCHMARKS.md); it keeps relaying while the operator's pod is deleted and replaced, and
// follows changes again once the new operator serves; a removed route reaches it too.
func TestCDSRelay(t *testing.T) {
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

	// The chart's deploy path: the Service and the NetworkPolicy limiting 13478 to dataplane
	// pods (this cluster's CNI enforces no NetworkPolicy: checked present, not enforced).
	cdsIP := strings.TrimSpace(kubectl(t, "-n", releaseNamespace, "get", "service", cdsService, "-o", "jsonpath={.spec.clusterIP}"))
	if net.ParseIP(cdsIP) == nil {
		t.Fatalf("Service %s/%s has no ClusterIP: %q", releaseNamespace, cdsService, cdsIP)
	}
	if out := kubectl(t, "-n", releaseNamespace, "get", "networkpolicies", "-o", "name"); strings.TrimSpace(out) == "" {
		t.Errorf("the chart installed no NetworkPolicy for the config discovery service")
	}
	manifests := []byte(fmt.Sprintf(cdsManifests, importedImage(t, dir, "ternd")))
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
		// The EndpointSlice OperatorRestart leaves for RouteRemoved.
		_ = clientset(t).DiscoveryV1().EndpointSlices("media-plane").Delete(context.Background(), toggledSlice, metav1.DeleteOptions{})
	})

	var server string // ternd by its pod's address
	var first pod
	step("Tokenless", func(t *testing.T) {
		start := time.Now()
		run(t, manifests, "kubectl", "apply", "-f", "-")
		testenv.Eventually(t, 120*time.Second, func() error {
			pods, err := readyPods(gatewayNamespace, cdsSelector)
			if err != nil || len(pods) != 1 {
				return fmt.Errorf("want one Ready ternd pod for the CDS Gateway, have %v (%v)", pods, err)
			}
			first = pods[0]
			server = net.JoinHostPort(first.ip, strconv.Itoa(cdsPort))
			return echoOnce(server, echo.ip, 500*time.Millisecond)
		})
		t.Logf("CDS Gateway's ternd pod relaying %.2fs after kubectl apply (ternd at %s)", time.Since(start).Seconds(), server)
		checkCDSMode(t, dir, first, "deployment", cdsGateway)
	})

	step("Relay", func(t *testing.T) {
		ip := strings.TrimSpace(kubectl(t, "-n", gatewayNamespace, "get", "service", cdsGateway, "-o", "jsonpath={.spec.clusterIP}"))
		checkRelay(t, uclient, echo.ip, server, net.JoinHostPort(ip, strconv.Itoa(cdsPort)))
	})

	step("ConfigPropagation", func(t *testing.T) {
		adds, removals := measurePropagation(t, server, bystander, propagationChanges)
		t.Logf("config propagation through CDS, EndpointSlice write to the new peer relayable: %s", summary(adds))
		t.Logf("config propagation through CDS, EndpointSlice write to the removed peer cut off: %s", summary(removals))
	})

	step("OperatorRestart", func(t *testing.T) {
		checkOperatorRestart(t, first, server, echo, bystander)
	})

	// The route to toggled-peer deleted while its EndpointSlice (left by OperatorRestart)
	// lists the bystander: a permission to it is refused again.
	step("RouteRemoved", func(t *testing.T) {
		a, err := allocate(server)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := echoVia(a.relay, bystander.ip, time.Second); err != nil {
			t.Fatalf("the bystander is not relayable before its route is deleted: %v", err)
		}
		start := time.Now()
		kubectl(t, "-n", gatewayNamespace, "delete", "udproutes.stunner.l7mp.io", "cds-toggled-route")
		testenv.Eventually(t, propagationBound, func() error {
			err := a.client.CreatePermission(&net.UDPAddr{IP: net.ParseIP(bystander.ip), Port: echoPort})
			if err == nil || !strings.Contains(err.Error(), "403") {
				return fmt.Errorf("a permission to %s after its route was deleted: %v, want 403", bystander.ip, err)
			}
			return nil
		})
		t.Logf("route deleted: its peer refused through CDS %v after kubectl delete returned", time.Since(start).Round(time.Millisecond))
	})
}

// checkCDSMode fails unless the pods of Gateway gw's workload (kind deployment or daemonset),
// p one of them, run as the default renders them: their config from the config discovery
// service, named by the ClusterIP of the chart's Service stunner-config-discovery in -c and
// STUNNER_CONFIG_ORIGIN (this cluster runs no DNS server), no ServiceAccount token
// (checkTokenless), and no Role or RoleBinding for the Gateway.
func checkCDSMode(t *testing.T, dir string, p pod, kind, gw string) {
	t.Helper()
	ip := strings.TrimSpace(kubectl(t, "-n", releaseNamespace, "get", "service", cdsService, "-o", "jsonpath={.spec.clusterIP}"))
	if net.ParseIP(ip) == nil {
		t.Fatalf("Service %s/%s has no ClusterIP: %q", releaseNamespace, cdsService, ip)
	}
	want := "http://" + net.JoinHostPort(ip, "13478")
	args := kubectl(t, "-n", gatewayNamespace, "get", kind, gw, "-o", "jsonpath={.spec.template.spec.containers[0].args[*]}")
	if !strings.HasSuffix(args, " -c "+want) {
		t.Errorf("%s %s: args %q, want them to end in -c %s", kind, gw, args, want)
	}
	env := kubectl(t, "-n", gatewayNamespace, "get", kind, gw, "-o",
		`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="STUNNER_CONFIG_ORIGIN")].value}`)
	if env != want {
		t.Errorf("%s %s: STUNNER_CONFIG_ORIGIN %q, want %q", kind, gw, env, want)
	}
	selector := "stunner.l7mp.io/related-gateway-name=" + gw
	if out := kubectl(t, "-n", gatewayNamespace, "get", "roles,rolebindings", "-l", selector, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("Gateway %s, its config from CDS, has a Role or RoleBinding: %s", gw, out)
	}
	checkTokenless(t, dir, p)
	t.Logf("Gateway %s: -c %s, no Role or RoleBinding", gw, want)
}

// checkTokenless fails unless p, a ternd pod, runs without Kubernetes API credentials: its
// spec says automountServiceAccountToken false and has no volume projecting a ServiceAccount
// token nor a mount at tokenDir, and in the running ternd container (seen from the node,
// through /proc/<pid>/root) there is nothing at tokenDir while the credentials Secret is
// mounted at /etc/tern/auth.
func checkTokenless(t *testing.T, dir string, p pod) {
	t.Helper()
	got, err := clientset(t).CoreV1().Pods(p.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Spec
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("pod %s: automountServiceAccountToken %v, want false", p.name, a)
	}
	for _, v := range spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					t.Errorf("pod %s: volume %s projects a ServiceAccount token", p.name, v.Name)
				}
			}
		}
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/var/run/secrets/kubernetes.io") {
				t.Errorf("pod %s: container %s mounts %s at %s", p.name, c.Name, m.Name, m.MountPath)
			}
		}
	}
	pid := containerPID(t, dir, p.name, "ternd")
	rootfs := "/proc/" + strconv.Itoa(pid) + "/root"
	if _, err := os.Stat(rootfs + "/etc/tern/auth"); err != nil {
		t.Fatalf("ternd container of %s (pid %d): the credentials mount: %v", p.name, pid, err)
	}
	if _, err := os.Stat(rootfs + tokenDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ternd container of %s (pid %d): %s: %v, want it absent", p.name, pid, tokenDir, err)
	}
	t.Logf("pod %s: automountServiceAccountToken false, no token volume, nothing at %s in its ternd container; ServiceAccount %s",
		p.name, tokenDir, spec.ServiceAccountName)
}

// containerPID finds the PID of the running container name of pod through the containerd of
// the node that runs it.
func containerPID(t *testing.T, dir, pod, name string) int {
	t.Helper()
	ids := map[string]bool{}
	for _, sock := range containerdSockets(t, dir) {
		for _, id := range strings.Fields(ctr(t, sock, "containers", "ls", "-q",
			"labels.\"io.kubernetes.pod.name\"=="+pod+",labels.\"io.kubernetes.container.name\"=="+name)) {
			ids[id] = true
		}
		for _, line := range strings.Split(ctr(t, sock, "tasks", "ls"), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && ids[f[0]] && f[2] == "RUNNING" {
				pid, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatal(err)
				}
				return pid
			}
		}
	}
	t.Fatalf("no running task of container %s of pod %s (containers %v)", name, pod, ids)
	return 0
}

// checkOperatorRestart deletes tern-operator's pod while clients relay through the CDS
// Gateway's ternd pod p (TURN at server): until ternd follows the new operator, the allocation
// made before keeps relaying to the echo, probed every 100 ms, and every tenth probe a new
// allocation relays too. Once the Deployment's new operator pod holds the leader Lease, an
// EndpointSlice of the toggled-peer Service lists peer; ternd has followed the new operator
// when peer is relayable (its watch reconnected with backoff, 250 ms doubling to 8 s), within
// 3 minutes of the deletion. The ternd pod is the same throughout and its container never
// restarted. The EndpointSlice is left for the caller to delete.
func checkOperatorRestart(t *testing.T, p pod, server string, echo, peer pod) {
	t.Helper()
	ops := runningPods(t, releaseNamespace, operatorSelector)
	if len(ops) != 1 {
		t.Fatalf("want one tern-operator pod, have %v", ops)
	}
	held, err := allocate(server)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	a, err := allocate(server) // probes peer, refused until its EndpointSlice reaches ternd
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	api := clientset(t).DiscoveryV1().EndpointSlices(peer.namespace)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: toggledSlice,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: toggledService,
				discoveryv1.LabelManagedBy:   "tern-cluster-e2e",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("echo"), Port: ptr(int32(echoPort)), Protocol: ptr(corev1.ProtocolUDP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{peer.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
	}

	start := time.Now()
	kubectl(t, "-n", releaseNamespace, "delete", "pod", ops[0].name, "--wait=false")
	var probes, fresh int
	var elected, written time.Time
	var newOp string
	for deadline := start.Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ternd did not follow a new operator 3 minutes after the deletion of %s (new operator %q elected at %v, EndpointSlice written at %v)",
				ops[0].name, newOp, elected.Format("15:04:05.000"), written.Format("15:04:05.000"))
		}
		if err := echoVia(held.relay, echo.ip, 2*time.Second); err != nil {
			t.Fatalf("the allocation held through the operator's restart stopped relaying %v after the deletion: %v",
				time.Since(start).Round(time.Millisecond), err)
		}
		if probes++; probes%5 == 1 {
			if err := echoOnce(server, echo.ip, 2*time.Second); err != nil {
				t.Fatalf("a new allocation %v after the operator's deletion: %v", time.Since(start).Round(time.Millisecond), err)
			}
			fresh++
		}
		if elected.IsZero() {
			holder, _ := tryRun(nil, "kubectl", "-n", releaseNamespace, "get", "lease", "tern-operator.stunner.l7mp.io",
				"-o", "jsonpath={.spec.holderIdentity}")
			for _, op := range runningPodsNow(releaseNamespace, operatorSelector) {
				if op.name != ops[0].name && strings.HasPrefix(holder, op.name) {
					elected, newOp = time.Now(), op.name
				}
			}
			if !elected.IsZero() {
				written = time.Now()
				if _, err := api.Create(context.Background(), slice, metav1.CreateOptions{}); err != nil {
					t.Fatalf("creating EndpointSlice %s: %v", toggledSlice, err)
				}
			}
			continue
		}
		if echoVia(a.relay, peer.ip, 100*time.Millisecond) == nil {
			break
		}
	}
	followed := time.Now()
	t.Logf("operator pod %s deleted; %s elected %.1fs later; an EndpointSlice written then relayable through ternd %.1fs after that (%.1fs after the deletion)",
		ops[0].name, newOp, elected.Sub(start).Seconds(), followed.Sub(written).Seconds(), followed.Sub(start).Seconds())
	t.Logf("meanwhile ternd relayed every probe: %d through the allocation held since before the deletion, %d through new allocations", probes, fresh)

	got, err := clientset(t).CoreV1().Pods(p.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ternd pod %s after the operator's restart: %v", p.name, err)
	}
	for _, c := range got.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Errorf("ternd pod %s: container %s restarted %d times", p.name, c.Name, c.RestartCount)
		}
	}
}
