package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

const sliceRenderYAML = `apiVersion: v1
kind: Namespace
metadata: {name: slicerender}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: slicerender-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: slicerender-config, namespace: slicerender}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: slicerender-config, namespace: slicerender}
spec: {dataplane: slicerender-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: slicerender-dataplane}
spec: {image: ternd:test, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw1, namespace: slicerender}
spec:
  gatewayClassName: slicerender-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: slicerender}
spec:
  gatewayClassName: slicerender-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: shared, namespace: slicerender}
spec: {clusterIP: None, ports: [{port: 7882, protocol: UDP}]}
---
apiVersion: v1
kind: Service
metadata: {name: own, namespace: slicerender}
spec: {clusterIP: None, ports: [{port: 7882, protocol: UDP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shared-1, namespace: slicerender, labels: {kubernetes.io/service-name: shared}}
addressType: IPv4
endpoints: [{addresses: [10.77.0.1], conditions: {ready: true}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: own-1, namespace: slicerender, labels: {kubernetes.io/service-name: own}}
addressType: IPv4
endpoints: [{addresses: [10.77.1.1], conditions: {ready: true}}]
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: to-shared, namespace: slicerender}
spec:
  parentRefs: [{name: gw1}]
  rules: [{backendRefs: [{name: shared}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: to-shared-and-own, namespace: slicerender}
spec:
  parentRefs: [{name: gw2}]
  rules: [{backendRefs: [{name: shared, port: 7882}, {name: own, port: 7882}]}]
`

// TestSliceRenderMatchesFullRender: an EndpointSlice change reaches the config of every
// Gateway with a route to its Service (a STUNner route of one, a Gateway API route of the
// other); on the cache's objects, the render of the Gateways that read a Service's slices
// (renderSlices) gives each the full render's result and leaves the others out; and a full
// render after the change writes no config other than the first one with the new endpoint.
func TestSliceRenderMatchesFullRender(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	if op.rec.gatewayRoutes == nil {
		t.Fatal("envtest serves no gateway.networking.k8s.io UDPRoute")
	}
	applyYAML(t, c, []byte(sliceRenderYAML))
	cs := kubernetes.NewForConfigOrDie(env.Config(t))
	w, err := cs.CoreV1().ConfigMaps("slicerender").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	firstWith := map[string]string{} // ConfigMap -> its first config holding the new endpoint
	go func() {
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			mu.Lock()
			if cfg := cm.Data[render.ConfigKey]; strings.Contains(cfg, "10.77.0.2") && firstWith[cm.Name] == "" {
				firstWith[cm.Name] = cfg
			}
			mu.Unlock()
		}
	}()
	testenv.Eventually(t, waitTimeout, func() error {
		for _, gw := range []string{"gw1", "gw2"} {
			var cm corev1.ConfigMap
			if err := get(c, "slicerender", gw, &cm); err != nil {
				return err
			}
			if !strings.Contains(cm.Data[render.ConfigKey], "10.77.0.1") {
				return fmt.Errorf("%s: config without 10.77.0.1 yet", gw)
			}
		}
		return nil
	})

	var es discoveryv1.EndpointSlice
	if err := get(c, "slicerender", "shared-1", &es); err != nil {
		t.Fatal(err)
	}
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.77.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
	if err := c.Update(ctx, &es); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, gw := range []string{"gw1", "gw2"} {
			if firstWith[gw] == "" {
				return fmt.Errorf("%s: config without 10.77.0.2 yet", gw)
			}
		}
		return nil
	})
	// On the cache's objects as they are now, the render of the Service's Gateways gives
	// each the full render's result, and leaves out the Gateways without a route to it.
	in, err := op.rec.collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := render.Render(in, op.rec.renderOptions(nil))
	for _, tt := range []struct {
		svc  string
		want []string
	}{
		{"shared", []string{"gw1", "gw2"}},
		{"own", []string{"gw2"}},
	} {
		_, part := op.rec.renderSlices(in, []types.NamespacedName{{Namespace: "slicerender", Name: tt.svc}})
		var got []string
		for i := range part.Gateways {
			g := &part.Gateways[i]
			if g.Namespace != "slicerender" {
				continue
			}
			got = append(got, g.Name)
			want, err := yaml.Marshal(full.Gateway(g.Namespace, g.Name))
			if err != nil {
				t.Fatal(err)
			}
			if b, err := yaml.Marshal(g); err != nil || string(b) != string(want) {
				t.Errorf("Service %s: Gateway %s rendered alone differs from the full render (%v):\n%s", tt.svc, g.Name, err, lineDiffText(string(want), string(b)))
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Service %s: rendered Gateways %v, want %v", tt.svc, got, tt.want)
		}
	}

	// A full render now, whatever the work queue holds.
	if _, err := op.rec.Reconcile(ctx, renderKey); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, gw := range []string{"gw1", "gw2"} {
		var cm corev1.ConfigMap
		if err := get(c, "slicerender", gw, &cm); err != nil {
			t.Fatal(err)
		}
		if got := cm.Data[render.ConfigKey]; got != firstWith[gw] {
			t.Errorf("%s: the full render wrote another config than the first with the new endpoint:\n%s", gw, lineDiffText(firstWith[gw], got))
		}
	}
}

// lineDiffText shows the first lines where two texts differ.
func lineDiffText(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var x, y string
		if i < len(wl) {
			x = wl[i]
		}
		if i < len(gl) {
			y = gl[i]
		}
		if x != y {
			fmt.Fprintf(&b, "line %d:\n  first: %s\n  full:  %s\n", i+1, x, y)
		}
	}
	return b.String()
}
