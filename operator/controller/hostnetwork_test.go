package controller

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

const hostNetworkYAML = `apiVersion: v1
kind: Namespace
metadata: {name: hostnet}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: hostnet-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: hostnet-config, namespace: hostnet}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: hostnet-config, namespace: hostnet}
spec: {dataplane: hostnet-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: hostnet-dataplane}
spec: {image: ternd:test, hostNetwork: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: hostnet}
spec:
  gatewayClassName: hostnet-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestHostNetworkRelayAddress: a hostNetwork dataplane on a node with an ExternalIP gives
// clients that address as its relay address (the Node read by the operator, whose
// ClusterRole may; ternd's Role stays namespaced), and the node's InternalIP on a node
// without one. A change of the node's ExternalIP reaches the config.
func TestHostNetworkRelayAddress(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	setAddresses := func(name string, addrs ...corev1.NodeAddress) {
		t.Helper()
		var n corev1.Node
		if err := get(c, "", name, &n); err != nil {
			n = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := c.Create(ctx, &n); err != nil {
				t.Fatal(err)
			}
		}
		n.Status.Addresses = addrs
		if err := c.Status().Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range []string{"hostnet-node-a", "hostnet-node-b"} {
			_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
	setAddresses("hostnet-node-a",
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.11"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.11"})
	setAddresses("hostnet-node-b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.12"})
	applyYAML(t, c, []byte(hostNetworkYAML))

	// relay returns the relay addresses ternd on node (with NODE_IP its InternalIP) gets.
	relay := func(node, nodeIP string) (bind, public string, err error) {
		var cm corev1.ConfigMap
		if err := get(c, "hostnet", "gw", &cm); err != nil {
			return "", "", err
		}
		env := map[string]string{"POD_IP": nodeIP, "NODE_IP": nodeIP, "NODE_NAME": node}
		cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]), func(k string) string { return env[k] })
		if err != nil {
			return "", "", err
		}
		return cfg.Relay.Address, cfg.Relay.PublicAddress, nil
	}
	want := func(node, nodeIP, wantPublic string) func() error {
		return func() error {
			bind, public, err := relay(node, nodeIP)
			if err != nil {
				return err
			}
			if bind != nodeIP || public != wantPublic {
				return fmt.Errorf("ternd on %s: relay binds %s advertising %q, want %s advertising %q", node, bind, public, nodeIP, wantPublic)
			}
			return nil
		}
	}
	testenv.Eventually(t, waitTimeout, want("hostnet-node-a", "10.1.0.11", "203.0.113.11"))
	testenv.Eventually(t, waitTimeout, want("hostnet-node-b", "10.1.0.12", ""))

	setAddresses("hostnet-node-a",
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.11"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.99"})
	setAddresses("hostnet-node-b",
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.12"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.12"})
	testenv.Eventually(t, waitTimeout, want("hostnet-node-a", "10.1.0.11", "203.0.113.99"))
	testenv.Eventually(t, waitTimeout, want("hostnet-node-b", "10.1.0.12", "203.0.113.12"))

	// ternd learns its node from the downward API: its pods get no token and no Role (their
	// config comes from the config discovery service, the default).
	var dep appsv1.Deployment
	if err := get(c, "hostnet", "gw", &dep); err != nil {
		t.Fatal(err)
	}
	nodeName := false
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !dep.Spec.Template.Spec.HostNetwork || !nodeName {
		t.Errorf("Deployment: hostNetwork %v, NODE_NAME from spec.nodeName %v; want both", dep.Spec.Template.Spec.HostNetwork, nodeName)
	}
	if a := dep.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("Deployment: automountServiceAccountToken %v, want false", a)
	}
	if err := absent(c, "hostnet", "gw", &rbacv1.Role{}); err != nil {
		t.Error(err)
	}
}
