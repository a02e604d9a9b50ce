package controller

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/k8sconfig"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// deliveryBound is the bound: a new media-server endpoint must reach a running
// dataplane within about a second.
const deliveryBound = time.Second

const deliveryYAML = `apiVersion: v1
kind: Namespace
metadata: {name: delivery}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: delivery-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: delivery-config, namespace: delivery}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: delivery-config, namespace: delivery}
spec: {dataplane: delivery-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: delivery-dataplane}
spec: {image: ternd:test, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: delivery}
spec:
  gatewayClassName: delivery-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: delivery}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: sfu}]}]
---
apiVersion: v1
kind: Service
metadata: {name: sfu, namespace: delivery}
spec:
  # from the static band of the service range: see testdata/seed_support.yaml
  clusterIP: 10.0.0.13
  ports: [{port: 7882, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: sfu-1
  namespace: delivery
  labels: {kubernetes.io/service-name: sfu}
addressType: IPv4
endpoints: [{addresses: [10.244.5.1], conditions: {ready: true}}]
`

// TestDelivery runs the dataplane's side of config delivery (k8sconfig.Watch, as ternd runs
// it) with the identity of the Gateway's dataplane pods, and measures how long a new
// media-server endpoint takes to go from an EndpointSlice update to the running dataplane:
// operator render, ConfigMap write, watch event. It also shows that the access the operator
// grants reaches that one ConfigMap and no other.
func TestDelivery(t *testing.T) {
	c := op.start(t)
	applyYAML(t, c, []byte(deliveryYAML))
	testenv.Eventually(t, waitTimeout, func() error { return get(c, "delivery", "gw", &corev1.ConfigMap{}) })

	// The pods run as the ServiceAccount render sets on the Deployment.
	kubeconfig := env.ImpersonatingKubeconfig(t, "system:serviceaccount:delivery:gw")

	t.Run("access limited to the Gateway's ConfigMap", func(t *testing.T) {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs := kubernetes.NewForConfigOrDie(rc)
		ctx := context.Background()
		testenv.Eventually(t, waitTimeout, func() error { // RBAC takes effect asynchronously
			_, err := cs.CoreV1().ConfigMaps("delivery").Get(ctx, "gw", metav1.GetOptions{})
			return err
		})
		applyYAML(t, c, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: delivery}\n"))
		if _, err := cs.CoreV1().ConfigMaps("delivery").Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get another ConfigMap: %v, want Forbidden", err)
		}
		if _, err := cs.CoreV1().ConfigMaps("delivery").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list all ConfigMaps: %v, want Forbidden", err)
		}
	})

	t.Run("new endpoint reaches the dataplane", func(t *testing.T) {
		t.Setenv("POD_IP", "10.244.0.10") // the rendered relay address is $(POD_IP)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		applied := make(chan *config.Config, 64)
		go func() {
			err := k8sconfig.Watch(ctx, kubeconfig, "delivery", "gw", render.ConfigKey,
				func(c *config.Config) error { applied <- c; return nil }, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		}()
		waitAllowlist(t, applied, 10*time.Second, []string{"10.0.0.13", "10.244.5.1"})

		var es discoveryv1.EndpointSlice
		if err := get(c, "delivery", "sfu-1", &es); err != nil {
			t.Fatal(err)
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.5.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
		start := time.Now()
		if err := c.Update(context.Background(), &es); err != nil {
			t.Fatal(err)
		}
		waitAllowlist(t, applied, deliveryBound, []string{"10.0.0.13", "10.244.5.1", "10.244.5.2"})
		t.Logf("EndpointSlice update to dataplane apply took %v (bound %v)", time.Since(start), deliveryBound)
	})
}

// waitAllowlist waits for apply to receive a config whose allowlist is want.
func waitAllowlist(t *testing.T, applied <-chan *config.Config, within time.Duration, want []string) {
	t.Helper()
	deadline := time.After(within)
	var last []string
	for {
		select {
		case c := <-applied:
			if last = endpoints(c); slices.Equal(last, want) {
				return
			}
		case <-deadline:
			t.Fatalf("allowlist %v not applied within %v (last applied %v)", want, within, last)
		}
	}
}
