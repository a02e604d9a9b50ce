package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1a2 "sigs.k8s.io/gateway-api/apis/v1alpha2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

// allowlistBound is how soon an EndpointSlice change must reach the rendered ConfigMap: the
// operator's share of the "reachable through TURN within about a second".
const allowlistBound = time.Second

// TestSeeds applies the manifests of STUNner's Gateway API reference (testdata/seed003*.yaml;
// see docs/stunner-compat.md) unchanged to a real API server and follows what the operator
// makes of them, step by step: the steps share the cluster state the earlier ones built, as a
// user applying the reference top to bottom would.
func TestSeeds(t *testing.T) {
	c := op.start(t)
	applyFile(t, c, "testdata/seed_support.yaml")
	applyFile(t, c, "testdata/seed003.yaml")

	t.Run("GatewayClass accepted", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var gc gwapiv1.GatewayClass
			if err := get(c, "", "stunner-gatewayclass", &gc); err != nil {
				return err
			}
			return condition(gc.Status.Conditions, "Accepted", metav1.ConditionTrue, "stunner/stunner-gatewayconfig")
		})
	})

	t.Run("missing default Dataplane reported, not fatal", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "stunner", "udp-gateway", &gw); err != nil {
				return err
			}
			return condition(gw.Status.Conditions, "Programmed", metav1.ConditionFalse, `Dataplane "default" not found`)
		})
		// The config and the Service do not need the template, so they are there already.
		for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Service{}} {
			if err := get(c, "stunner", "udp-gateway", obj); err != nil {
				t.Errorf("%T: %v", obj, err)
			}
		}
		if err := get(c, "stunner", "udp-gateway", &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment without a Dataplane: got %v, want NotFound", err)
		}
	})

	applyFile(t, c, "testdata/seed003_dataplane.yaml")

	t.Run("udp-gateway rendered and owned", func(t *testing.T) {
		var gw gwapiv1.Gateway
		var dep appsv1.Deployment
		testenv.Eventually(t, waitTimeout, func() error {
			if err := get(c, "stunner", "udp-gateway", &gw); err != nil {
				return err
			}
			return get(c, "stunner", "udp-gateway", &dep)
		})
		var cm corev1.ConfigMap
		var svc corev1.Service
		for _, obj := range []client.Object{&cm, &svc, &dep} {
			if err := get(c, "stunner", "udp-gateway", obj); err != nil {
				t.Fatal(err)
			}
			if err := ownedBy(obj, &gw); err != nil {
				t.Errorf("%T: %v", obj, err)
			}
		}

		cfg := parseConfig(t, &cm)
		if got, err := mountedAuth(c, "stunner", "udp-gateway", cfg); err != nil {
			t.Error(err)
		} else if want := (config.Auth{Type: "static", Realm: "stunner.l7mp.io", Username: "user-1", Password: "pass-1"}); got != want {
			t.Errorf("auth = %+v, want %+v (from the authRef Secret)", got, want)
		}
		if len(cfg.Listeners) != 1 || cfg.Listeners[0].Port != 3478 || cfg.Listeners[0].Protocol != protocol.TURNUDP {
			t.Errorf("listeners = %+v, want one TURN-UDP listener on 3478", cfg.Listeners)
		}
		if got, want := endpoints(cfg), []string{"10.0.0.11", "10.244.1.5", "10.244.2.9"}; !slices.Equal(got, want) {
			t.Errorf("allowlist = %v, want %v (ClusterIP and endpoints of media-plane/media-server-pool)", got, want)
		}

		ctr := dep.Spec.Template.Spec.Containers
		// The seed's Dataplane is STUNner's own (l7mp/stunnerd, command stunnerd): ternd runs
		// in its place, with the Dataplane's args.
		if len(ctr) != 1 || ctr[0].Image != render.DefaultImage() || !slices.Equal(ctr[0].Command, []string{"ternd"}) ||
			!slices.Contains(ctr[0].Args, "--udp-thread-num=16") {
			t.Errorf("containers = %+v, want ternd's image and command with the default Dataplane's args", ctr)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var dp stnrv1.Dataplane
			if err := get(c, "", "default", &dp); err != nil {
				return err
			}
			return condition(dp.Status.Conditions, ConditionSubstituted, metav1.ConditionTrue, "stunnerd replaced by ternd")
		})
		if g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 3600 {
			t.Errorf("terminationGracePeriodSeconds = %v, want 3600", g)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 1 ||
			svc.Spec.Ports[0].Port != 3478 || svc.Spec.Ports[0].Protocol != corev1.ProtocolUDP {
			t.Errorf("service = %s %+v, want LoadBalancer with UDP 3478", svc.Spec.Type, svc.Spec.Ports)
		}
	})

	t.Run("route attached", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var rt stnrv1.UDPRoute
			if err := get(c, "stunner", "media-plane-route", &rt); err != nil {
				return err
			}
			return parentConditions(rt.Status.Parents, "udp-gateway", "Accepted", "ResolvedRefs")
		})
	})

	t.Run("Gateway programmed with the Service's address", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "stunner", "udp-gateway", &gw); err != nil {
				return err
			}
			if err := condition(gw.Status.Conditions, "Accepted", metav1.ConditionTrue, ""); err != nil {
				return err
			}
			return condition(gw.Status.Conditions, "Programmed", metav1.ConditionFalse, "waiting for an address")
		})
		// envtest runs no load-balancer controller: play its part.
		var svc corev1.Service
		if err := get(c, "stunner", "udp-gateway", &svc); err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		if err := c.Status().Update(context.Background(), &svc); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "stunner", "udp-gateway", &gw); err != nil {
				return err
			}
			if len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value != "203.0.113.7" {
				return fmt.Errorf("addresses = %+v, want 203.0.113.7", gw.Status.Addresses)
			}
			return condition(gw.Status.Conditions, "Programmed", metav1.ConditionTrue, "")
		})
	})

	t.Run("allowlist follows EndpointSlice", func(t *testing.T) {
		steps := []struct {
			name string
			ips  []string // endpoint addresses of the slice
			want []string // the rendered allowlist
		}{
			{"endpoint added", []string{"10.244.1.5", "10.244.2.9", "10.244.7.7"}, []string{"10.0.0.11", "10.244.1.5", "10.244.2.9", "10.244.7.7"}},
			{"endpoint removed", []string{"10.244.7.7"}, []string{"10.0.0.11", "10.244.7.7"}},
		}
		for _, st := range steps {
			var es discoveryv1.EndpointSlice
			if err := get(c, "media-plane", "media-server-pool-1", &es); err != nil {
				t.Fatal(err)
			}
			es.Endpoints = nil
			for _, ip := range st.ips {
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
			}
			start := time.Now()
			if err := c.Update(context.Background(), &es); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, allowlistBound, func() error {
				var cm corev1.ConfigMap
				if err := get(c, "stunner", "udp-gateway", &cm); err != nil {
					return err
				}
				if got := endpoints(parseConfig(t, &cm)); !slices.Equal(got, st.want) {
					return fmt.Errorf("%s: allowlist = %v, want %v", st.name, got, st.want)
				}
				return nil
			})
			t.Logf("%s: EndpointSlice update to rendered ConfigMap took %v", st.name, time.Since(start))
		}
	})

	t.Run("Gateway API v1alpha2 UDPRoute attached", func(t *testing.T) {
		applyFile(t, c, "testdata/seed003_gwapi_route.yaml")
		testenv.Eventually(t, waitTimeout, func() error {
			var rt gwapiv1a2.UDPRoute
			if err := get(c, "stunner", "media-plane-route", &rt); err != nil {
				return err
			}
			return parentConditions(rt.Status.Parents, "udp-gateway", "Accepted", "ResolvedRefs")
		})
	})

	t.Run("complex-gateway: NodePort, annotations, TLS", func(t *testing.T) {
		// The reference's TLS listener names tls-secret, which it does not define: until it
		// exists the listener is reported and left out, and the UDP listener still works.
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "stunner", "complex-gateway", &gw); err != nil {
				return err
			}
			return listenerCondition(&gw, "tls-listener", "ResolvedRefs", metav1.ConditionFalse, "stunner/tls-secret not found")
		})
		applyYAML(t, c, []byte(`apiVersion: v1
kind: Secret
metadata: {name: tls-secret, namespace: stunner}
type: kubernetes.io/tls
stringData: {tls.crt: "-----BEGIN CERTIFICATE-----\n", tls.key: "-----BEGIN PRIVATE KEY-----\n"}
`))
		testenv.Eventually(t, waitTimeout, func() error {
			var svc corev1.Service
			if err := get(c, "stunner", "complex-gateway", &svc); err != nil {
				return err
			}
			if svc.Spec.Type != corev1.ServiceTypeNodePort {
				return fmt.Errorf("service type %s, want NodePort (stunner.l7mp.io/service-type)", svc.Spec.Type)
			}
			if got := svc.Annotations["service.beta.kubernetes.io/do-loadbalancer-healthcheck-path"]; got != "/live" {
				return fmt.Errorf("annotation healthcheck-path = %q, want /live copied from the Gateway", got)
			}
			return servicePorts(&svc, "UDP/3478", "TCP/443")
		})
	})

	t.Run("mixed-protocol-gateway in the default namespace", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var svc corev1.Service
			if err := get(c, "default", "mixed-protocol-gateway", &svc); err != nil {
				return err
			}
			return servicePorts(&svc, "UDP/3478", "TCP/3479")
		})
	})

	t.Run("StaticService route replaces the Service backend", func(t *testing.T) {
		applyFile(t, c, "testdata/seed003_static.yaml")
		testenv.Eventually(t, waitTimeout, func() error {
			var cm corev1.ConfigMap
			if err := get(c, "stunner", "udp-gateway", &cm); err != nil {
				return err
			}
			cfg := parseConfig(t, &cm)
			// The Gateway API route still names media-server-pool, so its addresses stay.
			want := []string{"10.0.0.11", "10.244.7.7", "192.0.2.0/24", "198.51.100.0/24"}
			if got := endpoints(cfg); !slices.Equal(got, want) {
				return fmt.Errorf("allowlist = %v, want %v", got, want)
			}
			return nil
		})
	})
}

// TestSeedAdopter applies an adopter's manifests (testdata/seed001.yaml; see
// docs/stunner-compat.md) next to the reference's: a Gateway with UDP and TCP listeners on one
// port, and a GatewayConfig with userName and a password held in a Secret, used through a
// GatewayClass of its own.
func TestSeedAdopter(t *testing.T) {
	c := op.start(t)
	applyFile(t, c, "testdata/seed_support.yaml")
	applyFile(t, c, "testdata/seed003.yaml")
	applyFile(t, c, "testdata/seed003_dataplane.yaml")
	applyFile(t, c, "testdata/seed001.yaml")

	t.Run("stunner-gateway", func(t *testing.T) {
		testenv.Eventually(t, waitTimeout, func() error {
			var cm corev1.ConfigMap
			if err := get(c, "stunner", "stunner-gateway", &cm); err != nil {
				return err
			}
			cfg := parseConfig(t, &cm)
			if len(cfg.Listeners) != 2 {
				return fmt.Errorf("listeners = %+v, want UDP and TCP", cfg.Listeners)
			}
			if got, want := endpoints(cfg), []string{"10.0.0.12", "10.244.4.4"}; !slices.Equal(got, want) {
				return fmt.Errorf("allowlist = %v, want %v", got, want)
			}
			var rt stnrv1.UDPRoute
			if err := get(c, "stunner", "media-route", &rt); err != nil {
				return err
			}
			return parentConditions(rt.Status.Parents, "stunner-gateway", "Accepted", "ResolvedRefs")
		})
	})

	t.Run("GatewayConfig with userName and a password Secret", func(t *testing.T) {
		applyYAML(t, c, []byte(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: adopter-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: stunner-config, namespace: stunner}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: adopter-gateway, namespace: apps}
spec:
  gatewayClassName: adopter-class
  listeners: [{name: udp-listener, port: 3478, protocol: TURN-UDP}]
`))
		testenv.Eventually(t, waitTimeout, func() error {
			var cm corev1.ConfigMap
			if err := get(c, "apps", "adopter-gateway", &cm); err != nil {
				return err
			}
			a, err := mountedAuth(c, "apps", "adopter-gateway", parseConfig(t, &cm))
			if err != nil {
				return err
			}
			if a.Username != "stunner" || a.Password != "adopter-pass" || a.Realm != "stunner.<domain>" {
				return fmt.Errorf("auth = %+v, want user stunner, the Secret's password and realm stunner.<domain>", a)
			}
			return nil
		})
	})
}

// parseConfig reads the dataplane config of a rendered ConfigMap as a dataplane pod would.
func parseConfig(t *testing.T, cm *corev1.ConfigMap) *config.Config {
	t.Helper()
	env := map[string]string{"POD_IP": "10.244.0.10", "NODE_IP": "192.168.0.10"}
	cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err)
	}
	return cfg
}

// endpoints returns the config's allowlist: every cluster's endpoints, sorted.
func endpoints(cfg *config.Config) []string {
	var out []string
	for _, cl := range cfg.Clusters {
		out = append(out, cl.Endpoints...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ownedBy checks that gw is obj's controlling owner, so deleting gw garbage-collects obj.
func ownedBy(obj client.Object, gw *gwapiv1.Gateway) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Gateway" || ref.Name != gw.Name || ref.UID != gw.UID {
		return fmt.Errorf("controller owner %+v, want Gateway %s (uid %s)", ref, gw.Name, gw.UID)
	}
	return nil
}

// parentConditions checks that the route status has a parent entry of this controller for
// the Gateway with each condition type true.
func parentConditions(parents []gwapiv1.RouteParentStatus, gateway string, types ...string) error {
	for _, p := range parents {
		if string(p.ParentRef.Name) != gateway {
			continue
		}
		if p.ControllerName != render.DefaultControllerName {
			return fmt.Errorf("parent %s: controllerName %q", gateway, p.ControllerName)
		}
		for _, typ := range types {
			if err := condition(p.Conditions, typ, metav1.ConditionTrue, ""); err != nil {
				return fmt.Errorf("parent %s: %w", gateway, err)
			}
		}
		return nil
	}
	return fmt.Errorf("no parent status for Gateway %s in %+v", gateway, parents)
}

// listenerCondition checks a condition of the named listener's status.
func listenerCondition(gw *gwapiv1.Gateway, listener, typ string, status metav1.ConditionStatus, msg string) error {
	for _, l := range gw.Status.Listeners {
		if string(l.Name) == listener {
			return condition(l.Conditions, typ, status, msg)
		}
	}
	return fmt.Errorf("no status for listener %s", listener)
}

// servicePorts checks that the Service exposes exactly the given PROTOCOL/port pairs.
func servicePorts(svc *corev1.Service, want ...string) error {
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, fmt.Sprintf("%s/%d", p.Protocol, p.Port))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("service %s/%s ports = %v, want %v", svc.Namespace, svc.Name, got, want)
	}
	return nil
}
