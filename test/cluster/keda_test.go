//go:build cluster

package cluster

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
)

// The Gateway TestKEDAScaling scales, and how: kedaThreshold allocations per replica, so
// kedaFirst pion/turn allocations on the first replica ask for ceil(210/100) = 3 replicas, the
// most the ScaledObject allows; kedaAllocations-kedaFirst more clients of the project's own
// (bench/turnclient, which follows 300 Try Alternate like libwebrtc) then allocate at the first
// replica's address and land on the two new ones by the balancing redirect.
const (
	kedaGateway     = "udp-keda"
	kedaSelector    = "stunner.l7mp.io/related-gateway-name=" + kedaGateway
	kedaPort        = 3480
	kedaThreshold   = 100
	kedaFirst       = 210
	kedaAllocations = 300
	kedaMax         = 3
	// The datagrams each allocation relays to the echo and back, none of them lost, and how
	// many clients relay at once.
	kedaPackets     = 10
	kedaConcurrency = 20
	// The Gateway's tern-gw.io/allocation-imbalance-percent.
	kedaImbalance = 50
	// The relay port range of the GatewayConfig, which the StaticService's backendRef
	// narrows the nodes' addresses to (ternd's default range).
	kedaRelayMin  = 20000
	kedaRelayMax  = 29999
	kedaNamespace = "keda" // KEDA's own namespace (its POD_NAMESPACE)
	mimirTenant   = "tern" // the tenant vmagent writes as and KEDA queries as
	// The address of the control plane's network namespace on the nodes' bridge
	// (hack/cluster.sh's cp_ip): where the API server reaches KEDA's metrics API server.
	controlPlaneIP = "10.244.0.1"
	// How long each scaling may take: KEDA polls every 5 s, the HPA controller syncs every
	// 15 s, a new ternd pod has to start; the machine is loaded.
	kedaScaleBound = 5 * time.Minute
)

// kedaManifests is the Gateway API side of TestKEDAScaling; %[1]s is the ternd image, %[2]d
// the imbalance, %[3]s the nodes' addresses. A Gateway of its own (TURN-UDP on kedaPort, a
// ClusterIP Service, balancing its replicas by tern-gw.io/allocation-imbalance-percent) on a
// Dataplane of its own: hostNetwork (each replica on a node of its own, clients at the node's
// address, alternates the nodes' addresses), the metrics endpoint on; a UDPRoute to the echo
// and, for Chromium's relay-to-relay call, to the nodes' addresses on the relay port range (a
// StaticService: the peer of each of the page's allocations is the other's relayed transport
// address, a node's address, which ternd opens only when a cluster names it exactly).
const kedaManifests = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: keda-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: keda-config, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: keda-config, namespace: stunner}
spec:
  realm: stunner.l7mp.io
  dataplane: keda
  authRef: {name: stunner-auth-secret, namespace: stunner}
  minPort: %[4]d
  maxPort: %[5]d
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: keda}
spec:
  replicas: 1
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
  name: udp-keda
  namespace: stunner
  annotations: {stunner.l7mp.io/service-type: ClusterIP, tern-gw.io/allocation-imbalance-percent: "%[2]d"}
spec:
  gatewayClassName: keda-class
  listeners: [{name: udp-listener, port: 3480, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: keda-route, namespace: stunner}
spec:
  parentRefs: [{name: udp-keda}]
  rules:
    - backendRefs:
        - {name: media-server-pool, namespace: media-plane}
        - {group: stunner.l7mp.io, kind: StaticService, name: keda-nodes, port: %[4]d, endPort: %[5]d}
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: keda-nodes, namespace: stunner}
spec:
  prefixes: [%[3]s]
`

// mimirClusterConfig runs Mimir as one process (target all) on 127.0.0.1 of the control
// plane's network namespace, filesystem storage under %[1]s, every ring in memory (the
// configuration of test/e2e's metrics test).
const mimirClusterConfig = `target: all
multitenancy_enabled: true
server:
  http_listen_address: 127.0.0.1
  http_listen_port: %[2]d
  grpc_listen_address: 127.0.0.1
  grpc_listen_port: %[3]d
  log_level: warn
memberlist:
  bind_addr: [127.0.0.1]
  bind_port: %[4]d
  advertise_addr: 127.0.0.1
common:
  storage:
    backend: filesystem
    filesystem: {dir: %[1]s/common}
blocks_storage:
  backend: filesystem
  filesystem: {dir: %[1]s/blocks}
  bucket_store: {sync_dir: %[1]s/tsdb-sync}
  tsdb: {dir: %[1]s/tsdb}
compactor:
  data_dir: %[1]s/compactor
  sharding_ring: {kvstore: {store: inmemory}, instance_addr: 127.0.0.1}
distributor:
  ring: {kvstore: {store: inmemory}, instance_addr: 127.0.0.1}
ingester:
  ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
    replication_factor: 1
    min_ready_duration: 0s
    final_sleep: 0s
    observe_period: 0s
store_gateway:
  sharding_ring: {kvstore: {store: inmemory}, instance_addr: 127.0.0.1, replication_factor: 1}
ruler:
  ring: {kvstore: {store: inmemory}, instance_addr: 127.0.0.1}
ruler_storage:
  backend: filesystem
  filesystem: {dir: %[1]s/rules}
query_scheduler:
  ring: {kvstore: {store: inmemory}, instance_addr: 127.0.0.1}
frontend:
  address: 127.0.0.1
`

// vmagentScrape is deploy/monitoring/vmagent.yaml's scrape config (Kubernetes pod discovery,
// STUNner's label and port name) through the cluster's kubeconfig (%[1]s), every second, kept
// to the Gateway of the test.
const vmagentScrape = `global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tern-dataplane
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: %[1]s
        namespaces: {names: [stunner]}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app]
        regex: stunner
        action: keep
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: metrics-port
        action: keep
      - source_labels: [__meta_kubernetes_pod_label_stunner_l7mp_io_related_gateway_name]
        regex: %[2]s
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_label_stunner_l7mp_io_related_gateway_name]
        target_label: gateway
`

// kedaAPIService registers KEDA's metrics API server as external.metrics.k8s.io: a Service
// with no selector whose Endpoints name the process's address in the control plane's network
// namespace (the API server routes to endpoints: hack/cluster.sh sets
// --enable-aggregator-routing). %[1]d is its port, %[2]s the CA of its certificate.
const kedaAPIService = `apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  ports: [{name: https, port: 443, targetPort: %[1]d, protocol: TCP}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: keda-metrics-apiserver, namespace: keda}
subsets:
  - addresses: [{ip: ` + controlPlaneIP + `}]
    ports: [{name: https, port: %[1]d, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  caBundle: %[2]s
`

// TestKEDAScaling is issue 26's "KEDA for real": the chain an adopter runs, every link real.
// Grafana Mimir (hack/mimir.sh) and vmagent run as processes in the control plane's network
// namespace; vmagent discovers the Gateway's ternd pods through the API server and
// remote-writes their metrics to Mimir; KEDA's operator and metrics API server (hack/keda.sh)
// run as processes with the cluster's kubeconfig, the latter registered as the
// external.metrics.k8s.io APIService; the chart's ScaledObject (keda.enabled, by helm
// upgrade) points KEDA at Mimir with sum(stunner_allocations_active) and a threshold of
// kedaThreshold allocations per replica. kedaFirst pion/turn allocations on the Gateway's one
// ternd pod scale its Deployment from 1 to 3 replicas, each on a node of its own (ScaleOut);
// the first replica then redirects every new client (bench/turnclient) to the others by
// 300 Try Alternate (Redirect); all kedaAllocations relay to the echo with none lost (Relay);
// Chromium, given only the first replica's address, follows the 300s and calls itself relay
// to relay through the new replicas, a data channel echoing every message (Chromium); releasing
// every allocation scales the Deployment back to 1 (ScaleIn, the HPA's scale-down
// stabilization set to 0 through the chart's keda.advanced). The figures are logged.
func TestKEDAScaling(t *testing.T) {
	dir := cluster(t)
	tag := installOperator(t)
	mimirBin := testenv.Mimir(t)
	kedaDir := testenv.KEDA(t)
	root := repoRoot(t)
	kubeconfig := os.Getenv("KUBECONFIG")
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	// The aggregation layer: the API server must proxy to extension API servers.
	if ca, _ := tryRun(nil, "kubectl", "-n", "kube-system", "get", "configmap", "extension-apiserver-authentication",
		"-o", "jsonpath={.data.requestheader-client-ca-file}"); ca == "" {
		t.Fatalf("the API server of %s has no front-proxy (requestheader) settings: the cluster was started by an older hack/cluster.sh; take it down and up again", dir)
	}

	testdata := func(name string) string { return filepath.Join(root, "test", "cluster", "testdata", name) }
	kubectl(t, "apply", "-f", testdata("gateway-prereqs.yaml"))
	kubectl(t, "apply", "-f", testdata("media-server.yaml"))
	kubectl(t, "-n", "media-plane", "rollout", "status", "deployment/media-server", "--timeout=120s")
	echo := runningPods(t, "media-plane", "app=media-server")[0]
	startPeer(t, dir, echo)
	var nodeIPs []string
	for _, n := range clusterNodes(t) {
		nodeIPs = append(nodeIPs, n.ip)
	}
	manifests := []byte(fmt.Sprintf(kedaManifests, importedImage(t, dir, "ternd"), kedaImbalance,
		strings.Join(nodeIPs, ", "), kedaRelayMin, kedaRelayMax))
	run(t, manifests, "kubectl", "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = tryRun(manifests, "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	// The setup runs on t itself, not in subtests: the processes and objects it starts stay
	// until the test ends (a subtest's cleanups run when the subtest does).
	var first pod
	testenv.Eventually(t, 180*time.Second, func() error {
		pods, err := readyPods(gatewayNamespace, kedaSelector)
		if err != nil || len(pods) != 1 || pods[0].ip != pods[0].hostIP {
			return fmt.Errorf("want one Ready ternd pod for Gateway %s on its node's address, have %v (%v)", kedaGateway, pods, err)
		}
		if err := echoOnce(kedaServer(pods[0]), echo.ip, 500*time.Millisecond); err != nil {
			return err
		}
		first = pods[0]
		return nil
	})

	mimir := startClusterMimir(t, mimirBin)
	startClusterVmagent(t, kubeconfig, mimir, kedaGateway)
	// The ternd pod's series reaches Mimir: sum(stunner_allocations_active) is 0.
	start := time.Now()
	testenv.Eventually(t, 120*time.Second, func() error {
		v, err := mimirSum(mimir)
		if err == nil && v != 0 {
			err = fmt.Errorf("sum(stunner_allocations_active) = %v with no allocation, want 0", v)
		}
		return err
	})
	t.Logf("Mimir has the ternd pod's stunner_allocations_active %.1fs after vmagent started", time.Since(start).Seconds())

	run(t, []byte(kubectl(t, "create", "namespace", kedaNamespace, "--dry-run=client", "-o", "yaml")), "kubectl", "apply", "-f", "-")
	kubectl(t, "apply", "--server-side", "-f", filepath.Join(kedaDir, "crds"))
	testenv.Eventually(t, 60*time.Second, func() error {
		est, err := tryRun(nil, "kubectl", "get", "crd", "scaledobjects.keda.sh",
			"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		if err != nil || est != "True" {
			return fmt.Errorf("CRD scaledobjects.keda.sh Established=%q (%v)", est, err)
		}
		return nil
	})
	start = time.Now()
	startKEDA(t, kedaDir, kubeconfig)
	t.Logf("KEDA's metrics API server Available as external.metrics.k8s.io %.1fs after its start", time.Since(start).Seconds())

	// The chart's ScaledObject, by helm upgrade of the release.
	vals := chartValues(tag, false)
	vals["gateway"] = map[string]any{"name": kedaGateway, "namespace": gatewayNamespace}
	vals["keda"] = map[string]any{
		"enabled":         true,
		"minReplicaCount": 1,
		"maxReplicaCount": kedaMax,
		"serverAddress":   mimir + "/prometheus",
		"threshold":       strconv.Itoa(kedaThreshold),
		"tenant":          mimirTenant,
		"pollingInterval": 5,
		"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{
			"scaleDown": map[string]any{"stabilizationWindowSeconds": 0},
			"scaleUp":   map[string]any{"stabilizationWindowSeconds": 0},
		}}},
	}
	helmUpgrade(t, vals)
	// Taken out again while KEDA still runs (its finalizer on the ScaledObject goes with it),
	// before the processes stop: cleanups run last registered first.
	t.Cleanup(func() {
		helmUpgrade(t, chartValues(tag, false))
		_, _ = tryRun(nil, "kubectl", "-n", gatewayNamespace, "wait", "--for=delete", "--timeout=60s", "scaledobject/"+kedaGateway)
	})
	testenv.Eventually(t, 120*time.Second, func() error {
		ready, err := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "scaledobject", kedaGateway,
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil || ready != "True" {
			return fmt.Errorf("ScaledObject %s/%s Ready=%q (%v)", gatewayNamespace, kedaGateway, ready, err)
		}
		return nil
	})
	// The metric the HPA KEDA made reads, through the APIService.
	testenv.Eventually(t, 120*time.Second, func() error {
		out, err := tryRun(nil, "kubectl", "get", "--raw",
			"/apis/external.metrics.k8s.io/v1beta1/namespaces/"+gatewayNamespace+"/s0-prometheus?labelSelector=scaledobject.keda.sh%2Fname%3D"+kedaGateway)
		if err != nil || !strings.Contains(out, `"metricName":"s0-prometheus"`) {
			return fmt.Errorf("external metric s0-prometheus: %q (%v)", out, err)
		}
		return nil
	})

	server := kedaServer(first)
	var (
		allocs     []*turnAlloc    // the pion/turn clients, on the first replica
		redirected []*kedaRedirect // the clients that came later, on the others
	)
	defer func() {
		for _, a := range allocs {
			a.Close()
		}
		for _, r := range redirected {
			r.close()
		}
	}()
	step("ScaleOut", func(t *testing.T) {
		// Half the clients from the test's own address, half from another node's: ternd's
		// per-client-address quota (DefaultAllocationsPerIP, 486 past it) is below kedaFirst.
		var other string
		for _, n := range requireNodes(t, kedaMax) {
			if n.name != first.node {
				other = n.name
			}
		}
		fromOther := func() (net.PacketConn, error) { return listenUDPIn(nodeNetns(dir, other)) }
		start := time.Now()
		var mu sync.Mutex
		err := parallel(kedaFirst, kedaConcurrency, func(i int) error {
			listen := listenFunc(nil)
			if i%2 == 1 {
				listen = fromOther
			}
			a, err := allocateFrom(server, listen)
			if err != nil {
				return err
			}
			mu.Lock()
			allocs = append(allocs, a)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		allocated := time.Since(start)
		testenv.Eventually(t, kedaScaleBound, func() error {
			v, err := mimirSum(mimir)
			if err != nil || v != kedaFirst {
				return fmt.Errorf("sum(stunner_allocations_active) = %v (%v), want %d", v, err, kedaFirst)
			}
			return nil
		})
		inMimir := time.Since(start)
		waitReplicas(t, kedaMax)
		t.Logf("KEDA scale-out: %d pion/turn allocations on %s in %.1fs; in Mimir after %.1fs; %d Ready replicas after %.1fs",
			kedaFirst, server, allocated.Seconds(), inMimir.Seconds(), kedaMax, time.Since(start).Seconds())
	})

	var replicas []pod // the three, first among them
	step("Redirect", func(t *testing.T) {
		start := time.Now()
		pods, err := readyPods(gatewayNamespace, kedaSelector)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			if p.ip != p.hostIP {
				t.Fatalf("replica %v is not on its node's address", p)
			}
			nodes[p.node] = true
		}
		if len(nodes) != kedaMax {
			t.Fatalf("replicas %v on %d nodes, want %d", pods, len(nodes), kedaMax)
		}
		replicas = pods
		// The first replica holds all kedaFirst allocations, the new ones none: once its
		// config names them in its alternates and its balancer has read their /status, a
		// new client's first Allocate there gets 300 Try Alternate naming one of them.
		firstAddr := netip.AddrPortFrom(netip.MustParseAddr(first.ip), kedaPort)
		testenv.Eventually(t, 120*time.Second, func() error {
			code, alt, err := unsignedAllocate(firstAddr)
			if err != nil {
				return err
			}
			if code != stun.CodeTryAlternate {
				return fmt.Errorf("Allocate at %v: %d, want 300 once it balances", firstAddr, code)
			}
			if alt.Addr() == firstAddr.Addr() || alt.Port() != kedaPort {
				return fmt.Errorf("300 from %v names ALTERNATE-SERVER %v, want another replica's", firstAddr, alt)
			}
			return nil
		})
		balancing := time.Since(start)
		var mu sync.Mutex
		err = parallel(kedaAllocations-kedaFirst, kedaConcurrency, func(int) error {
			r, err := kedaAllocate(firstAddr)
			if err != nil {
				return err
			}
			mu.Lock()
			redirected = append(redirected, r)
			mu.Unlock()
			if r.c.Server() == firstAddr {
				return fmt.Errorf("a new client allocated on the first replica %v after the scale-out, want another", firstAddr)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Per replica: its own stunner_allocations_active; the first counts every 300 in
		// tern_redirects_total{reason="imbalance"}.
		var per []string
		total := 0
		for _, p := range replicas {
			n, err := scrapeSample(kedaMetrics(p), "stunner_allocations_active")
			if err != nil {
				t.Fatal(err)
			}
			if p.name == first.name && n != kedaFirst {
				t.Errorf("first replica %v: stunner_allocations_active = %d, want %d", p, n, kedaFirst)
			}
			total += int(n)
			per = append(per, fmt.Sprintf("%s=%d", p.node, n))
		}
		if total != kedaAllocations {
			t.Errorf("the replicas' stunner_allocations_active sum to %d (%v), want %d", total, per, kedaAllocations)
		}
		redirects, err := scrapeSample(kedaMetrics(first), `tern_redirects_total{reason="imbalance"}`)
		if err != nil {
			t.Fatal(err)
		}
		if redirects < kedaAllocations-kedaFirst {
			t.Errorf(`first replica %v: tern_redirects_total{reason="imbalance"} = %d, want at least the %d clients redirected`, first, redirects, kedaAllocations-kedaFirst)
		}
		testenv.Eventually(t, 120*time.Second, func() error {
			v, err := mimirSum(mimir)
			if err != nil || v != kedaAllocations {
				return fmt.Errorf("sum(stunner_allocations_active) = %v (%v), want %d", v, err, kedaAllocations)
			}
			return nil
		})
		t.Logf("after the scale-out: first replica balancing (300 to a new one) %.1fs after 3 were Ready; %d new clients at %v all redirected and allocated on the others in %.1fs; allocations per node %v; first's tern_redirects_total{reason=\"imbalance\"} = %d; Mimir sums %d",
			balancing.Seconds(), kedaAllocations-kedaFirst, firstAddr, time.Since(start).Seconds()-balancing.Seconds(), per, redirects, kedaAllocations)
	})

	step("Relay", func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		sent, got := 0, 0
		err := parallel(kedaAllocations, kedaConcurrency, func(i int) error {
			var s, r int
			var err error
			if i < len(allocs) {
				s, r, err = relayOn(allocs[i], echo.ip, uint32(i), kedaPackets)
			} else {
				s, r, err = redirected[i-len(allocs)].relay(echo.ip, kedaPackets)
			}
			mu.Lock()
			sent += s
			got += r
			mu.Unlock()
			if err == nil && r != kedaPackets {
				err = fmt.Errorf("allocation %d: %d of %d datagrams echoed", i, r, kedaPackets)
			}
			return err
		})
		if err != nil {
			t.Error(err)
		}
		t.Logf("%d allocations on %d replicas relayed %d datagrams to the echo, %d came back (%d lost), in %.1fs",
			kedaAllocations, len(replicas), sent, got, sent-got, time.Since(start).Seconds())
	})

	step("Chromium", func(t *testing.T) { kedaChromium(t, first, replicas) })

	step("ScaleIn", func(t *testing.T) {
		start := time.Now()
		for _, a := range allocs {
			a.Close()
		}
		allocs = nil
		for _, r := range redirected {
			r.close()
		}
		redirected = nil
		waitReplicas(t, 1)
		t.Logf("KEDA scale-in: allocations released; 1 replica left after %.1fs", time.Since(start).Seconds())
	})
}

// kedaServer is the TURN address of a TestKEDAScaling replica: its node's address.
func kedaServer(p pod) string { return net.JoinHostPort(p.ip, strconv.Itoa(kedaPort)) }

// kedaMetrics is the /metrics URL of a TestKEDAScaling replica (hostNetwork: its node's
// address, the Dataplane's metrics port).
func kedaMetrics(p pod) string { return "http://" + net.JoinHostPort(p.ip, "8080") + "/metrics" }

// parallel runs f(0) ... f(n-1), at most limit at once, and returns the first error.
func parallel(n, limit int, f func(i int) error) error {
	sem := make(chan struct{}, limit)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// kedaRedirect is one of TestKEDAScaling's later clients: bench/turnclient's allocation,
// made wherever the 300s sent it.
type kedaRedirect struct {
	c    *turnclient.Client
	conn *net.UDPConn
}

// kedaAllocate allocates at server with bench/turnclient, following 300 Try Alternate.
func kedaAllocate(server netip.AddrPort) (*kedaRedirect, error) {
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return nil, err
	}
	c := turnclient.New(conn, server, turnclient.Credentials{Username: turnUser, Password: turnPass})
	if _, err := c.Allocate(0); err != nil {
		conn.Close()
		return nil, fmt.Errorf("Allocate at %v: %w", server, err)
	}
	return &kedaRedirect{c: c, conn: conn}, nil
}

// relay sends packets Send indications to the echo on echoIP:9001 through r's allocation, one
// at a time, and counts the echoes (each waited for up to 2 s).
func (r *kedaRedirect) relay(echoIP string, packets int) (sent, received int, err error) {
	peer := netip.AddrPortFrom(netip.MustParseAddr(echoIP), echoPort)
	if err := r.c.CreatePermission(peer); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1500)
	defer r.conn.SetReadDeadline(time.Time{})
	for i := range packets {
		payload := fmt.Sprintf("keda-%v-%d", r.conn.LocalAddr(), i)
		frame, _, err := turnclient.SendIndication(peer, []byte(payload))
		if err != nil {
			return sent, received, err
		}
		if _, err := r.conn.WriteToUDPAddrPort(frame, r.c.Server()); err != nil {
			return sent, received, err
		}
		sent++
		_ = r.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			n, err := r.conn.Read(buf)
			if err != nil {
				break // counted as lost
			}
			if p, ok := turnclient.Payload(buf[:n]); ok && string(p) == payload {
				received++
				break
			}
		}
	}
	return sent, received, nil
}

// close ends r's allocation (a Refresh of lifetime 0) and closes its socket.
func (r *kedaRedirect) close() {
	_ = r.c.Refresh(0)
	_ = r.conn.Close()
}

// waitReplicas waits up to kedaScaleBound for the Gateway's Deployment to ask for n replicas
// and have n Ready pods and no other.
func waitReplicas(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(kedaScaleBound)
	for {
		spec, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "deployment", kedaGateway, "-o", "jsonpath={.spec.replicas}")
		ready, err := readyPods(gatewayNamespace, kedaSelector)
		running := runningPodsNow(gatewayNamespace, kedaSelector)
		if spec == strconv.Itoa(n) && err == nil && len(ready) == n && len(running) == n {
			return
		}
		if time.Now().After(deadline) {
			hpa, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "describe", "hpa")
			so, _ := tryRun(nil, "kubectl", "-n", gatewayNamespace, "get", "scaledobject", kedaGateway, "-o", "yaml")
			t.Fatalf("Deployment %s/%s: spec.replicas %q, Ready pods %v, running %v after %v; want %d\nHPA:\n%s\nScaledObject:\n%s",
				gatewayNamespace, kedaGateway, spec, ready, running, kedaScaleBound, n, hpa, so)
		}
		time.Sleep(2 * time.Second)
	}
}

// daemon is a process the test started, stopped by its PID (SIGTERM, then SIGKILL) when the
// test ends; its output is logged when the test failed.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns the last 8,000 bytes written.
func (l *lockedBuffer) String() string { return l.tail(8000) }

// tail returns the last n bytes written, from a line start where one is near.
func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < 200 {
			s = s[i+1:]
		}
		s = "...\n" + s
	}
	return s
}

// all returns everything written.
func (l *lockedBuffer) all() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

func startDaemon(t *testing.T, env []string, name string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, cmd: exec.Command(args[0], args[1:]...), out: &lockedBuffer{}, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.Env = append(os.Environ(), env...)
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			// A short tail only: several daemons' full logs would push the test's own
			// failure message out of what CI shows. The whole log goes to a file.
			where := "not kept"
			if f, err := os.CreateTemp("", "tern-"+strings.ReplaceAll(name, " ", "-")+"-*.log"); err == nil {
				_, _ = f.Write(d.out.all())
				_ = f.Close()
				where = f.Name()
			}
			t.Logf("%s output (last lines; all of it in %s):\n%s", name, where, d.out.tail(1500))
		}
	})
	return d
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// handedOut holds the ports freeTCPPort has returned in this test process.
var handedOut sync.Map

// freeTCPPort returns a port free on ip for TCP and for UDP (Mimir's memberlist binds both) at
// the time of the call, never one it returned before in this process: the daemons that get
// these ports bind them later, so two of them must not be handed the same one.
func freeTCPPort(t *testing.T, ip string) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp4", net.JoinHostPort(ip, strconv.Itoa(port)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = u.Close()
		if _, dup := handedOut.LoadOrStore(port, true); !dup {
			return port
		}
	}
	t.Fatalf("no port free for TCP and UDP on %s in 100 tries", ip)
	return 0
}

// startClusterMimir runs Mimir and returns its base URL once /ready answers. A Mimir that exits
// before it is ready is started once more on fresh ports, with the lines it logged at level
// error in the test's log: the ports it is given are free when chosen but bound only later.
func startClusterMimir(t *testing.T, bin string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		base, d := startClusterMimirOnce(t, bin)
		if base != "" {
			return base
		}
		if attempt == 2 {
			t.Fatalf("mimir exited before it was ready, twice; its last lines:\n%s", d.out.tail(3000))
		}
		t.Logf("mimir exited before it was ready; starting it again on other ports. Its errors:\n%s", errorLines(d.out.all()))
	}
}

// startClusterMimirOnce starts Mimir and waits for its /ready. It returns Mimir's base URL, or ""
// when the process exited first.
func startClusterMimirOnce(t *testing.T, bin string) (string, *daemon) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mimir.yaml")
	httpPort := freeTCPPort(t, "127.0.0.1")
	conf := fmt.Sprintf(mimirClusterConfig, filepath.Join(dir, "data"), httpPort, freeTCPPort(t, "127.0.0.1"), freeTCPPort(t, "127.0.0.1"))
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// Its activity log in the temporary directory, not Mimir's default ./metrics-activity.log
	// (the package's directory, where go test runs it).
	d := startDaemon(t, nil, "mimir", bin, "-config.file="+cfg, "-activity-tracker.filepath="+filepath.Join(dir, "metrics-activity.log"))
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	exited := false
	testenv.Eventually(t, 120*time.Second, func() error {
		if d.exited() {
			exited = true
			return nil
		}
		resp, err := http.Get(base + "/ready")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("mimir /ready: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	})
	if exited {
		return "", d
	}
	return base, d
}

// errorLines returns the lines of a logfmt log at level=error (at most 20), or a note that
// there are none.
func errorLines(log []byte) string {
	var out []string
	for line := range strings.SplitSeq(string(log), "\n") {
		if strings.Contains(line, "level=error") && len(out) < 20 {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "(none at level=error)"
	}
	return strings.Join(out, "\n")
}

// startClusterVmagent runs Debian's vmagent with vmagentScrape kept to the ternd pods of
// gateway, remote-writing to Mimir as mimirTenant, with deploy/monitoring/vmagent.yaml's flags.
func startClusterVmagent(t *testing.T, kubeconfig, mimir, gateway string) {
	t.Helper()
	bin, err := exec.LookPath("vmagent")
	testenv.Require(t, "vmagent (Debian package victoria-metrics; hack/mimir.sh installs it)", err)
	dir := t.TempDir()
	scrape := filepath.Join(dir, "scrape.yaml")
	if err := os.WriteFile(scrape, fmt.Appendf(nil, vmagentScrape, kubeconfig, gateway), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, nil, "vmagent", bin,
		"-promscrape.config="+scrape,
		"-remoteWrite.url="+mimir+"/api/v1/push",
		"-remoteWrite.headers=X-Scope-OrgID:"+mimirTenant,
		"-remoteWrite.flushInterval=1s",
		"-remoteWrite.tmpDataPath="+filepath.Join(dir, "remotewrite"),
		"-httpListenAddr=127.0.0.1:"+strconv.Itoa(freeTCPPort(t, "127.0.0.1")),
		"-loggerLevel=WARN")
}

// mimirSum asks Mimir, as KEDA does, for sum(stunner_allocations_active); no series is an error.
func mimirSum(mimir string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, mimir+"/prometheus/api/v1/query?query="+url.QueryEscape("sum(stunner_allocations_active)"), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Scope-OrgID", mimirTenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("mimir query: %d: %w", resp.StatusCode, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("mimir query: %s", r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("mimir query: %d series, want 1", len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// startKEDA runs KEDA's operator and metrics API server with the cluster's kubeconfig and
// registers the latter as the external.metrics.k8s.io APIService. Their gRPC link is mutual
// TLS (KEDA's ca.crt, tls.crt, tls.key in one directory): one certificate of a CA made here
// serves both ends, and the API server's connections to the metrics API server (by its
// Service's name, keda-metrics-apiserver.keda.svc, at controlPlaneIP).
func startKEDA(t *testing.T, kedaDir, kubeconfig string) {
	t.Helper()
	certs := t.TempDir()
	caPEM := writeKEDACerts(t, certs)
	grpcAddr := "127.0.0.1:" + strconv.Itoa(freeTCPPort(t, "127.0.0.1"))
	env := []string{"KUBECONFIG=" + kubeconfig, "WATCH_NAMESPACE=", "POD_NAMESPACE=" + kedaNamespace,
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + kedaNamespace}
	op := startDaemon(t, env, "keda-operator", filepath.Join(kedaDir, "keda"),
		"--cert-dir="+certs, "--ca-dir="+certs,
		"--metrics-service-bind-address="+grpcAddr,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(freeTCPPort(t, "127.0.0.1")),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(freeTCPPort(t, "127.0.0.1")),
		"--zap-log-level=info")
	port := freeTCPPort(t, controlPlaneIP)
	ad := startDaemon(t, env, "keda-adapter", filepath.Join(kedaDir, "keda-adapter"),
		"--secure-port="+strconv.Itoa(port), "--bind-address="+controlPlaneIP,
		"--cert-dir="+certs,
		"--tls-cert-file="+filepath.Join(certs, "tls.crt"), "--tls-private-key-file="+filepath.Join(certs, "tls.key"),
		"--lister-kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--metrics-service-address="+grpcAddr,
		"--port="+strconv.Itoa(freeTCPPort(t, "127.0.0.1")))
	apiService := fmt.Appendf(nil, kedaAPIService, port, base64.StdEncoding.EncodeToString(caPEM))
	run(t, apiService, "kubectl", "apply", "-f", "-")
	// Unregistered before the metrics API server stops: an APIService with no server behind it
	// breaks API discovery (kubectl, Helm) for the tests after this one.
	t.Cleanup(func() {
		_, _ = tryRun(apiService, "kubectl", "delete", "--ignore-not-found", "-f", "-")
	})
	testenv.Eventually(t, 180*time.Second, func() error {
		for _, d := range []*daemon{op, ad} {
			if d.exited() {
				t.Fatalf("%s exited:\n%s", d.name, d.out.String())
			}
		}
		avail, err := tryRun(nil, "kubectl", "get", "apiservice", "v1beta1.external.metrics.k8s.io",
			"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
		if err != nil || !strings.HasPrefix(avail, "True") {
			return fmt.Errorf("APIService v1beta1.external.metrics.k8s.io Available: %q (%v)", avail, err)
		}
		return nil
	})
}

// writeKEDACerts writes ca.crt, tls.crt and tls.key into dir and returns the CA's PEM.
func writeKEDACerts(t *testing.T, dir string) []byte {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tern-test-keda-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "keda"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames: []string{"localhost", "keda-metrics-apiserver", "keda-metrics-apiserver.keda",
			"keda-metrics-apiserver.keda.svc", "keda-operator.keda.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(controlPlaneIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for name, data := range map[string][]byte{
		"ca.crt":  caPEM,
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPEM
}
