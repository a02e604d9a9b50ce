package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/pion/stun/v3"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/controller"
)

// propagationBound is the bound on config delivery: a media server added to a route
// must be reachable through TURN within about a second.
const propagationBound = time.Second

// apiServer is the kube-apiserver and etcd of the operator tests, started on first use.
var apiServer = testenv.New(testenv.Options{CRDPaths: testenv.MustDeployCRDPaths()})

// operatorManifests is a Gateway whose one route reaches the StaticService peer-a
// (127.0.0.2/32) and not peer-b (127.0.0.3/32). The Dataplane has no health endpoint, so the
// test does not depend on port 8086 being free.
const operatorManifests = `apiVersion: v1
kind: Namespace
metadata: {name: e2e-op}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: e2e-op-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: e2e-op-config, namespace: e2e-op}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: e2e-op-config, namespace: e2e-op}
spec: {dataplane: e2e-op-dataplane, realm: stunner.l7mp.io, authType: static, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: e2e-op-dataplane}
spec: {image: ternd:e2e, disableHealthCheck: true, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: e2e-op}
spec:
  gatewayClassName: e2e-op-class
  listeners: [{name: udp, port: %d, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peer-a, namespace: e2e-op}
spec: {prefixes: [127.0.0.2/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peer-b, namespace: e2e-op}
spec: {prefixes: [127.0.0.3/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-op}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peer-a}]}]
`

// The UDPRoute after the change: peer-b joins peer-a.
const operatorRouteChanged = `apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-op}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs:
    - {group: stunner.l7mp.io, kind: StaticService, name: peer-a}
    - {group: stunner.l7mp.io, kind: StaticService, name: peer-b}
`

// TestOperatorConfigDelivery runs the whole control loop on real parts: tern-operator's
// controller against a real kube-apiserver, and the real ternd binary started the way the
// rendered Deployment of a Dataplane in ConfigMap mode (configSource: ConfigMap) starts it
// (the ConfigMap's config as its file, the ConfigMap watched through the API as the Gateway's
// ServiceAccount; TestCDS covers the default, the config discovery service). A pion/turn client relays through an
// allocation to a peer on the route while the route gains a second backend; the test measures
// how long it takes until a second client may reach the new peer, and checks that the first
// allocation relayed throughout.
func TestOperatorConfigDelivery(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn is not configured by the operator")
	}
	cfg := apiServer.Config(t)
	scheme := controller.NewScheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	creds := &secretVolume{dir: t.TempDir()}
	startOperator(t, creds.dir)

	port := listenerPort(t)
	testenv.Apply(t, c, fmt.Appendf(nil, operatorManifests, port))

	// The ConfigMap is what the pod mounts as its config file, the Secret its credentials.
	cfgPath := mountRendered(t, c, "e2e-op", "gw", creds)
	kubeconfig := apiServer.ImpersonatingKubeconfig(t, "system:serviceaccount:e2e-op:gw")

	s := startTerndFromConfigMap(t, cfgPath, kubeconfig, "e2e-op", port)
	peerA := startEchoPeer(t, "127.0.0.2:0")
	peerB := startEchoPeer(t, "127.0.0.3:0")

	// Client A relays to peer A all through the change: one packet every 5 ms, each echoed.
	ca := newPionClient(t, s, testUser, testPassword)
	relayA := ca.allocate(t)
	roundTrips(t, relayA, peerA.addr, 3)
	stream := startStream(relayA, peerA.addr, 5*time.Millisecond)

	// Client B may not reach peer B yet.
	cb := newPionClient(t, s, testUser, testPassword)
	relayB := cb.allocate(t)
	if m := cb.transact(t, stun.MethodCreatePermission, peerAddress(peerB.addr)); errorCode(m) != 403 {
		t.Fatalf("CreatePermission to peer B before the change: error %d, want 403", errorCode(m))
	}

	start := time.Now()
	testenv.Apply(t, c, []byte(operatorRouteChanged))
	testenv.Eventually(t, 10*time.Second, func() error {
		if m := cb.transact(t, stun.MethodCreatePermission, peerAddress(peerB.addr)); errorCode(m) != 0 {
			return fmt.Errorf("peer B still refused (%d) after the route change", errorCode(m))
		}
		return nil
	})
	took := time.Since(start)
	t.Logf("UDPRoute change to peer B reachable through ternd: %v (bound %v)", took, propagationBound)
	if took > propagationBound {
		t.Errorf("the new backend took %v to become reachable, want within %v", took, propagationBound)
	}
	roundTrips(t, relayB, peerB.addr, 3)

	// Keep client A's stream going past the change, for 50 more echoes (about 250 ms at one
	// packet per 5 ms), then check it never stopped.
	after := stream.got.Load() + 50
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := stream.got.Load(); n < after {
			return fmt.Errorf("client A: %d echoes, want %d: the stream stalled after the route change", n, after)
		}
		return nil
	})
	sent, got, gap := stream.stop()
	t.Logf("client A during the change: %d sent, %d echoed, longest gap between echoes %v", sent, got, gap)
	if sent == 0 || float64(got) < 0.99*float64(sent) {
		t.Errorf("client A: %d of %d packets echoed, want at least 99%%", got, sent)
	}
	if gap > 250*time.Millisecond {
		t.Errorf("client A: longest gap between echoes %v, want under 250ms", gap)
	}
	if n := strings.Count(s.out.String(), "listener started"); n > 1 {
		t.Errorf("the listener was started %d times; a route change must not restart it", n)
	}
	ca.assertQuiet(t)
}

// startOperator runs tern-operator's controller in this process against the API server until
// the test ends. Its Gateways' credentials are files in credentialsDir, where the tests
// mirror the rendered Secrets (secretVolume) as kubelet mounts them in a pod. Each add runs
// before the manager starts, to add runnables such as the auth service.
func startOperator(t *testing.T, credentialsDir string, add ...func(manager.Manager) error) {
	t.Helper()
	startOperatorWith(t, controller.Options{CredentialsDir: credentialsDir}, add...)
}

// startOperatorWith is startOperator with the controller's options given whole. It returns
// what stops the operator before the test ends (an operator restart); stopping twice is safe.
func startOperatorWith(t *testing.T, opts controller.Options, add ...func(manager.Manager) error) (stop func()) {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	scheme := controller.NewScheme()
	mgr, err := ctrl.NewManager(apiServer.Config(t), manager.Options{
		Scheme:                 scheme,
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each test runs an operator of its own in this one process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	for _, f := range add {
		if err := f(mgr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("operator: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("operator did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startTerndFromConfigMap starts ternd as the rendered Deployment does: -c with the mounted
// config, TERN_CONFIGMAP naming the ConfigMap gw in namespace to watch, POD_IP for the
// $(POD_IP) relay address. It waits until the listener answers a STUN Binding.
func startTerndFromConfigMap(t *testing.T, cfgPath, kubeconfig, namespace string, port int) *server {
	t.Helper()
	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	cmd := exec.Command(terndBinary(t), "-c", cfgPath, "--kubeconfig", kubeconfig, "-l", "info")
	cmd.Env = append(os.Environ(), "TERN_CONFIGMAP="+namespace+"/gw", "POD_IP=127.0.0.1", "POD_NAMESPACE="+namespace)
	s.start(t, cmd)
	s.waitBinding(t)
	return s
}

// stream sends numbered packets through a relay to an echoing peer on a fixed schedule and
// records the echoes.
type stream struct {
	conn     net.PacketConn
	sent     atomic.Int64
	got      atomic.Int64
	maxGap   atomic.Int64 // nanoseconds between consecutive echoes
	quitSend chan struct{}
	quitRecv chan struct{}
	sender   sync.WaitGroup
	receiver sync.WaitGroup
}

func startStream(relay net.PacketConn, peer *net.UDPAddr, every time.Duration) *stream {
	s := &stream{conn: relay, quitSend: make(chan struct{}), quitRecv: make(chan struct{})}
	s.sender.Add(1)
	s.receiver.Add(1)
	go func() {
		defer s.sender.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.quitSend:
				return
			case <-tick.C:
			}
			if _, err := relay.WriteTo([]byte("stream-"+strconv.Itoa(i)), peer); err == nil {
				s.sent.Add(1)
			}
		}
	}()
	go func() {
		defer s.receiver.Done()
		buf := make([]byte, 1500)
		last := time.Now()
		for {
			_ = relay.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _, err := relay.ReadFrom(buf)
			now := time.Now()
			if err == nil {
				s.got.Add(1)
				if gap := now.Sub(last); int64(gap) > s.maxGap.Load() {
					s.maxGap.Store(int64(gap))
				}
				last = now
			}
			select {
			case <-s.quitRecv:
				// The sender has stopped: done once every packet is echoed, or once
				// nothing came for a read timeout (the rest is lost).
				if err != nil || s.got.Load() >= s.sent.Load() {
					return
				}
			default:
			}
		}
	}()
	return s
}

// stop ends the stream once the echoes still on their way have arrived (or a read timed out
// waiting for them) and returns packets sent, packets echoed and the longest gap between echoes.
func (s *stream) stop() (sent, got int64, gap time.Duration) {
	close(s.quitSend)
	s.sender.Wait()
	close(s.quitRecv)
	s.receiver.Wait()
	_ = s.conn.SetReadDeadline(time.Time{})
	return s.sent.Load(), s.got.Load(), time.Duration(s.maxGap.Load())
}

func ptrTo[T any](v T) *T { return &v }
