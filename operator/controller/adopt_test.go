package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// The Gateways exist before their class, as after STUNner's operator is uninstalled and
// before Tern's starts: the objects STUNner rendered are created for them first.
const adoptYAML = `apiVersion: v1
kind: Namespace
metadata: {name: adopt}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: adopt-config, namespace: adopt}
spec: {dataplane: adopt-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: adopt-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: adopt}
spec:
  gatewayClassName: adopt-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-other, namespace: adopt}
spec:
  gatewayClassName: adopt-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-none, namespace: adopt}
spec:
  gatewayClassName: adopt-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

const adoptClassYAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: adopt-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: adopt-config, namespace: adopt}
`

// stunnerObjectsYAML is shaped as STUNner's operator renders a Gateway's objects in managed
// dataplane mode: its owned-by and related-gateway labels, the related-gateway annotation, a
// plain (not controller) owner reference to the Gateway, an immutable ConfigMap holding
// stunnerd.conf, a LoadBalancer Service and a Deployment selecting its pods with
// matchExpressions. The Service also has a port no listener of the Gateway asks for any more.
// Formatted with the Gateway's UID.
const stunnerObjectsYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: gw
  namespace: adopt
  labels: {stunner.l7mp.io/owned-by: stunner, stunner.l7mp.io/related-gateway-name: gw, stunner.l7mp.io/related-gateway-namespace: adopt}
  annotations: {stunner.l7mp.io/related-gateway-name: adopt/gw}
  ownerReferences: [{apiVersion: gateway.networking.k8s.io/v1, kind: Gateway, name: gw, uid: %[1]s}]
immutable: true
data: {stunnerd.conf: '{"version":"v1","admin":{"name":"adopt/gw"}}'}
---
apiVersion: v1
kind: Service
metadata:
  name: gw
  namespace: adopt
  labels: {stunner.l7mp.io/owned-by: stunner, stunner.l7mp.io/related-gateway-name: gw, stunner.l7mp.io/related-gateway-namespace: adopt}
  annotations: {stunner.l7mp.io/related-gateway-name: adopt/gw}
  ownerReferences: [{apiVersion: gateway.networking.k8s.io/v1, kind: Gateway, name: gw, uid: %[1]s}]
spec:
  type: LoadBalancer
  selector: {app: stunner, stunner.l7mp.io/related-gateway-name: gw, stunner.l7mp.io/related-gateway-namespace: adopt}
  ports:
  - {name: udp-listener, port: 3478, protocol: UDP}
  - {name: old-listener, port: 3480, protocol: UDP}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gw
  namespace: adopt
  labels: {stunner.l7mp.io/owned-by: stunner, stunner.l7mp.io/related-gateway-name: gw, stunner.l7mp.io/related-gateway-namespace: adopt}
  annotations: {stunner.l7mp.io/related-gateway-name: adopt/gw}
  ownerReferences: [{apiVersion: gateway.networking.k8s.io/v1, kind: Gateway, name: gw, uid: %[1]s}]
spec:
  replicas: 1
  selector:
    matchExpressions:
    - {key: app, operator: In, values: [stunner]}
    - {key: stunner.l7mp.io/related-gateway-name, operator: In, values: [gw]}
    - {key: stunner.l7mp.io/related-gateway-namespace, operator: In, values: [adopt]}
  template:
    metadata:
      labels: {app: stunner, stunner.l7mp.io/related-gateway-name: gw, stunner.l7mp.io/related-gateway-namespace: adopt}
      annotations: {stunner.l7mp.io/related-gateway-name: adopt/gw}
    spec:
      containers:
      - name: stunnerd
        image: docker.io/l7mp/stunnerd:1.0.0
        command: [stunnerd]
        args: [-w, --udp-thread-num=16]
        ports: [{containerPort: 3478, protocol: UDP}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gw-other
  namespace: adopt
  labels: {stunner.l7mp.io/owned-by: stunner}
  ownerReferences: [{apiVersion: gateway.networking.k8s.io/v1, kind: Gateway, name: gw-other, uid: %[1]s}]
data: {stunnerd.conf: "{}"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gw-none
  namespace: adopt
  labels: {stunner.l7mp.io/owned-by: stunner}
data: {stunnerd.conf: "{}"}
`

// stunnerFieldManager is the field manager STUNner's operator writes as: controller-runtime
// sends none, so the API server names it after the binary, /manager in STUNner's image.
const stunnerFieldManager = "manager"

// TestAdoptStunnerObjects: the objects STUNner's operator rendered for a Gateway are taken
// over in place (the Service and Deployment keep their UIDs, the Service its cluster IP, node
// port and load-balancer address) with Tern's content and one controller reference to the
// Gateway; the immutable ConfigMap is replaced. Objects with STUNner's label but an owner
// reference to another Gateway's UID, or none, are still conflicts.
func TestAdoptStunnerObjects(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(adoptYAML))
	var gw gwapiv1.Gateway
	if err := get(c, "adopt", "gw", &gw); err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(fmt.Sprintf(stunnerObjectsYAML, gw.UID)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		// Created as STUNner's operator does (ctrlutil.CreateOrPatch), not applied.
		if err := c.Create(ctx, u, client.FieldOwner(stunnerFieldManager)); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	var svc corev1.Service
	if err := get(c, "adopt", "gw", &svc); err != nil {
		t.Fatal(err)
	}
	// A cloud's load-balancer controller gave the Service its address (192.0.2.0/24 is for
	// documentation: nothing is sent there).
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	if err := c.Status().Update(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	var stunnerCM corev1.ConfigMap
	var stunnerDep appsv1.Deployment
	if err := get(c, "adopt", "gw", &stunnerCM); err != nil {
		t.Fatal(err)
	}
	if err := get(c, "adopt", "gw", &stunnerDep); err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 || svc.Spec.ClusterIP == "" {
		t.Fatalf("STUNner's Service got no node port or cluster IP: %+v", svc.Spec)
	}
	conflicting := map[string]*corev1.ConfigMap{"gw-other": {}, "gw-none": {}}
	for name, cm := range conflicting {
		if err := get(c, "adopt", name, cm); err != nil {
			t.Fatal(err)
		}
	}

	applyYAML(t, c, []byte(adoptClassYAML))

	testenv.Eventually(t, waitTimeout, func() error {
		if err := gatewayCondition(c, "adopt", "gw", string(gwapiv1.GatewayConditionProgrammed), metav1.ConditionTrue, ""); err != nil {
			return err
		}
		for name := range conflicting {
			if err := gatewayCondition(c, "adopt", name, string(gwapiv1.GatewayConditionProgrammed), metav1.ConditionFalse,
				"ConfigMap adopt/"+name); err != nil {
				return err
			}
		}
		return nil
	})

	var cm corev1.ConfigMap
	var dep appsv1.Deployment
	svc = corev1.Service{}
	for _, obj := range []client.Object{&cm, &svc, &dep} {
		if err := get(c, "adopt", "gw", obj); err != nil {
			t.Fatal(err)
		}
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != gw.UID || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T owner references %+v, want one controller reference to the Gateway", obj, refs)
		}
		if v := obj.GetLabels()[render.LabelManagedBy]; v != render.LabelManagedByValue {
			t.Errorf("%T label %s=%q, want %q", obj, render.LabelManagedBy, v, render.LabelManagedByValue)
		}
	}

	t.Run("ConfigMap replaced", func(t *testing.T) {
		if cm.UID == stunnerCM.UID {
			t.Errorf("the immutable ConfigMap was kept (UID %s)", cm.UID)
		}
		if _, ok := cm.Data["stunnerd.conf"]; ok || cm.Data[render.ConfigKey] == "" || cm.Immutable != nil && *cm.Immutable {
			t.Errorf("ConfigMap keys %v, immutable %v; want only %s, mutable", keys(cm.Data), cm.Immutable, render.ConfigKey)
		}
	})
	t.Run("Service in place", func(t *testing.T) {
		if svc.UID == "" || svc.Spec.ClusterIP == "" {
			t.Fatalf("Service %+v", svc.Spec)
		}
		var ports []string
		for _, p := range svc.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
			if p.Port == 3478 && p.NodePort != nodePort {
				t.Errorf("node port of 3478/UDP changed: %d -> %d", nodePort, p.NodePort)
			}
			if p.Port == 3480 {
				t.Errorf("STUNner's port 3480, which no listener asks for, is still there")
			}
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "192.0.2.10" {
			t.Errorf("load-balancer ingress %v, want 192.0.2.10 kept", ing)
		}
		want := map[string]string{render.LabelApp: render.LabelAppValue, render.LabelGatewayName: "gw", render.LabelGatewayNamespace: "adopt"}
		if !reflect.DeepEqual(svc.Spec.Selector, want) {
			t.Errorf("Service selector %v, want %v", svc.Spec.Selector, want)
		}
		t.Logf("ports %v", ports)
	})
	t.Run("Deployment in place", func(t *testing.T) {
		if dep.UID != stunnerDep.UID {
			t.Errorf("Deployment replaced (UID %s -> %s), want it updated in place", stunnerDep.UID, dep.UID)
		}
		if !reflect.DeepEqual(dep.Spec.Selector, stunnerDep.Spec.Selector) {
			t.Errorf("selector %v, want STUNner's %v kept", dep.Spec.Selector, stunnerDep.Spec.Selector)
		}
		var names []string
		for _, ctr := range dep.Spec.Template.Spec.Containers {
			names = append(names, ctr.Name+"="+ctr.Image)
		}
		if want := []string{render.ContainerName + "=ternd:test"}; !reflect.DeepEqual(names, want) {
			t.Errorf("containers %v, want %v", names, want)
		}
		if v := dep.Spec.Template.Labels[render.LabelManagedBy]; v != render.LabelManagedByValue {
			t.Errorf("pod template label %s=%q", render.LabelManagedBy, v)
		}
	})
	t.Run("events on the Gateway", func(t *testing.T) {
		// Recorded asynchronously, so waited for.
		testenv.Eventually(t, waitTimeout, func() error {
			var list eventsv1.EventList
			if err := c.List(ctx, &list, client.InNamespace("adopt")); err != nil {
				return err
			}
			got := map[string]bool{}
			for _, e := range list.Items {
				if e.Regarding.UID == gw.UID && e.Related != nil {
					got[e.Reason+" "+e.Related.Kind] = true
				}
			}
			for _, want := range []string{ReasonReplacedStunnerObject + " ConfigMap", ReasonTookOverStunnerObject + " Service",
				ReasonTookOverStunnerObject + " Deployment"} {
				if !got[want] {
					return fmt.Errorf("no event %q about the Gateway; have %v", want, got)
				}
			}
			return nil
		})
	})
	t.Run("foreign objects untouched", func(t *testing.T) {
		for name, was := range conflicting {
			var now corev1.ConfigMap
			if err := get(c, "adopt", name, &now); err != nil {
				t.Fatal(err)
			}
			if now.ResourceVersion != was.ResourceVersion {
				t.Errorf("ConfigMap %s changed: %+v", name, now.ObjectMeta)
			}
		}
	})
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMustReplace: only what the API server refuses to change is replaced: an immutable
// ConfigMap, and a workload whose selector selects other labels than the rendered one.
// STUNner's matchExpressions select the same labels as Tern's matchLabels.
func TestMustReplace(t *testing.T) {
	tern := map[string]string{"app": "stunner", "stunner.l7mp.io/related-gateway-name": "gw"}
	in := func(k string, v ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: v}
	}
	dep := func(sel metav1.LabelSelector) *appsv1.Deployment {
		return &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: &sel}}
	}
	rendered := dep(metav1.LabelSelector{MatchLabels: tern})
	tests := []struct {
		name    string
		cur     client.Object
		replace bool
	}{
		{"same matchLabels", dep(metav1.LabelSelector{MatchLabels: tern}), false},
		{"STUNner's matchExpressions", dep(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			in("app", "stunner"), in("stunner.l7mp.io/related-gateway-name", "gw")}}), false},
		{"mixed forms", dep(metav1.LabelSelector{MatchLabels: map[string]string{"app": "stunner"},
			MatchExpressions: []metav1.LabelSelectorRequirement{in("stunner.l7mp.io/related-gateway-name", "gw")}}), false},
		{"fewer labels", dep(metav1.LabelSelector{MatchLabels: map[string]string{"app": "stunner"}}), true},
		{"other Gateway", dep(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			in("app", "stunner"), in("stunner.l7mp.io/related-gateway-name", "gw2")}}), true},
		{"In with two values", dep(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			in("app", "stunner"), in("stunner.l7mp.io/related-gateway-name", "gw", "gw2")}}), true},
		{"immutable ConfigMap", &corev1.ConfigMap{Immutable: ptr(true)}, true},
		{"mutable ConfigMap", &corev1.ConfigMap{Immutable: ptr(false)}, false},
		{"Service", &corev1.Service{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := client.Object(rendered)
			if _, ok := tt.cur.(*appsv1.Deployment); !ok {
				r = tt.cur.DeepCopyObject().(client.Object)
			}
			if why := mustReplace(tt.cur, r); (why != "") != tt.replace {
				t.Errorf("mustReplace = %q, want replace %v", why, tt.replace)
			}
		})
	}
}
