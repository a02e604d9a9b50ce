package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

const alternatesYAML = `apiVersion: v1
kind: Namespace
metadata: {name: alternates}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: alternates-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: alternates-config, namespace: alternates}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: alternates-config, namespace: alternates}
spec: {dataplane: alternates-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: alternates-dataplane}
spec: {image: ternd:test, hostNetwork: true, replicas: 3}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: alternates}
spec:
  gatewayClassName: alternates-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: alternates}
spec:
  gatewayClassName: alternates-class
  listeners: [{name: udp, port: 3479, protocol: TURN-UDP}]
`

// TestAlternatesFollowEndpointSlices: a hostNetwork Gateway's ConfigMap lists as alternates
// its ready replicas' node addresses (the ExternalIP where the node has one, port 0), as the
// EndpointSlices of the Gateway's own Service say; a replica turning not ready (a draining
// ternd) or terminating leaves the list, a new one joins it, and a deleted slice empties it.
// Each change rewrites that Gateway's ConfigMap only: not its Deployment (no rollout), not
// another Gateway's ConfigMap.
func TestAlternatesFollowEndpointSlices(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	nodes := map[string][]corev1.NodeAddress{
		"alternates-node-a": {{Type: corev1.NodeInternalIP, Address: "10.2.0.11"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.21"}},
		"alternates-node-b": {{Type: corev1.NodeInternalIP, Address: "10.2.0.12"}},
		"alternates-node-c": {{Type: corev1.NodeInternalIP, Address: "10.2.0.13"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.23"}},
	}
	t.Cleanup(func() {
		for name := range nodes {
			_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
	for name, addrs := range nodes {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, &n); err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = addrs
		if err := c.Status().Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	applyYAML(t, c, []byte(alternatesYAML))

	// alternates returns the alternates of gateway's rendered config, and its ConfigMap's
	// resourceVersion.
	alternates := func(gateway string) ([]string, string, error) {
		var cm corev1.ConfigMap
		if err := get(c, "alternates", gateway, &cm); err != nil {
			return nil, "", err
		}
		env := map[string]string{"POD_IP": "10.2.0.11", "NODE_IP": "10.2.0.11", "NODE_NAME": "alternates-node-a"}
		cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]), func(k string) string { return env[k] })
		if err != nil {
			return nil, "", err
		}
		return cfg.Alternates, cm.ResourceVersion, nil
	}
	want := func(list ...string) func() error {
		return func() error {
			got, _, err := alternates("gw")
			if err != nil {
				return err
			}
			if !slices.Equal(got, list) {
				return fmt.Errorf("alternates %q, want %q", got, list)
			}
			return nil
		}
	}
	testenv.Eventually(t, waitTimeout, want())
	var dep appsv1.Deployment
	testenv.Eventually(t, waitTimeout, func() error { return get(c, "alternates", "gw", &dep) })
	var otherVersion string
	testenv.Eventually(t, waitTimeout, func() (err error) {
		_, otherVersion, err = alternates("other")
		return err
	})

	endpoint := func(ip, node string, ready, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: &terminating}}
	}
	es := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gw-abcde", Namespace: "alternates",
			Labels: map[string]string{discoveryv1.LabelServiceName: "gw"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			endpoint("10.2.0.11", "alternates-node-a", true, false),
			endpoint("10.2.0.12", "alternates-node-b", true, false),
		},
	}
	if err := c.Create(ctx, &es); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, want("10.2.0.12:0", "203.0.113.21:0"))

	// node-a's ternd drains (its /ready turns 503), a third replica on node-c becomes ready,
	// and node-b's pod is deleted (terminating).
	es.Endpoints = []discoveryv1.Endpoint{
		endpoint("10.2.0.11", "alternates-node-a", false, false),
		endpoint("10.2.0.12", "alternates-node-b", false, true),
		endpoint("10.2.0.13", "alternates-node-c", true, false),
	}
	if err := c.Update(ctx, &es); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, want("203.0.113.23:0"))

	if err := c.Delete(ctx, &es); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, want())

	var after appsv1.Deployment
	if err := get(c, "alternates", "gw", &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != dep.ResourceVersion {
		t.Errorf("the Deployment was rewritten (resourceVersion %s -> %s): a change of the ready replicas must reach the ConfigMap only", dep.ResourceVersion, after.ResourceVersion)
	}
	if _, v, err := alternates("other"); err != nil || v != otherVersion {
		t.Errorf("the other Gateway's ConfigMap: resourceVersion %s -> %s (%v); want it untouched", otherVersion, v, err)
	}
}
