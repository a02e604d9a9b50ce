package controller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// The objects that take the Gateway's names are created before it, by someone else: a
// ConfigMap and a ServiceAccount (kinds the operator's cache holds only when labelled as its
// own) and a Service (a kind it caches whole).
const conflictYAML = `apiVersion: v1
kind: Namespace
metadata: {name: conflict}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: gw, namespace: conflict, labels: {team: payments}}
data: {settings: "someone else's"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: gw, namespace: conflict}
---
apiVersion: v1
kind: Service
metadata: {name: gw, namespace: conflict}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: conflict-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: conflict-config, namespace: conflict}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: conflict-config, namespace: conflict}
spec: {dataplane: conflict-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: conflict-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: conflict}
spec:
  gatewayClassName: conflict-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestForeignObjectsAreNotTakenOver: objects named after a Gateway that the operator did not
// create are left exactly as they are, none of the Gateway's objects is applied, and the
// Gateway says why; once the names are free, the Gateway is programmed as usual.
func TestForeignObjectsAreNotTakenOver(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(conflictYAML))
	foreign := func() []client.Object {
		return []client.Object{&corev1.ConfigMap{}, &corev1.ServiceAccount{}, &corev1.Service{}}
	}
	before := foreign()
	for _, obj := range before {
		if err := get(c, "conflict", "gw", obj); err != nil {
			t.Fatal(err)
		}
	}

	programmed := func() (*metav1.Condition, error) {
		var gw gwapiv1.Gateway
		if err := get(c, "conflict", "gw", &gw); err != nil {
			return nil, err
		}
		cond := meta.FindStatusCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
		if cond == nil || cond.ObservedGeneration != gw.Generation {
			return nil, fmt.Errorf("no Programmed condition for generation %d: %v", gw.Generation, gw.Status.Conditions)
		}
		return cond, nil
	}
	testenv.Eventually(t, waitTimeout, func() error {
		cond, err := programmed()
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionFalse || cond.Reason != ReasonConflict {
			return fmt.Errorf("Programmed is %s/%s (%q), want False/%s", cond.Status, cond.Reason, cond.Message, ReasonConflict)
		}
		for _, want := range []string{"ConfigMap conflict/gw", "ServiceAccount conflict/gw", "Service conflict/gw"} {
			if !strings.Contains(cond.Message, want) {
				return fmt.Errorf("Programmed message %q does not name %s", cond.Message, want)
			}
		}
		return nil
	})

	for i, obj := range foreign() {
		if err := get(c, "conflict", "gw", obj); err != nil {
			t.Fatal(err)
		}
		was := before[i]
		if obj.GetResourceVersion() != was.GetResourceVersion() || len(obj.GetOwnerReferences()) != 0 ||
			!reflect.DeepEqual(obj.GetLabels(), was.GetLabels()) || !reflect.DeepEqual(obj.GetAnnotations(), was.GetAnnotations()) {
			t.Errorf("%T changed: resourceVersion %s -> %s, owners %v, labels %v, annotations %v", obj,
				was.GetResourceVersion(), obj.GetResourceVersion(), obj.GetOwnerReferences(), obj.GetLabels(), obj.GetAnnotations())
		}
	}
	var cm corev1.ConfigMap
	if err := get(c, "conflict", "gw", &cm); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cm.Data, map[string]string{"settings": "someone else's"}) {
		t.Errorf("foreign ConfigMap's data changed: %v", cm.Data)
	}
	// A Deployment would run with the foreign ServiceAccount and read the foreign ConfigMap.
	if err := get(c, "conflict", "gw", &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment: got %v, want NotFound (nothing applied while names conflict)", err)
	}

	del := func(t *testing.T, obj client.Object) {
		t.Helper()
		if err := get(c, "conflict", "gw", obj); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("one name freed", func(t *testing.T) {
		// The Service is cached, so its deletion renders again at once; the others remain.
		del(t, &corev1.Service{})
		testenv.Eventually(t, waitTimeout, func() error {
			cond, err := programmed()
			if err != nil {
				return err
			}
			if cond.Reason != ReasonConflict || strings.Contains(cond.Message, "Service conflict/gw") ||
				!strings.Contains(cond.Message, "ConfigMap conflict/gw") {
				return fmt.Errorf("Programmed %s: %q, want a conflict naming the ConfigMap and not the Service", cond.Reason, cond.Message)
			}
			return nil
		})
		if err := get(c, "conflict", "gw", &corev1.Service{}); !apierrors.IsNotFound(err) {
			t.Errorf("Service: got %v, want NotFound while other names conflict", err)
		}
	})

	t.Run("all names freed", func(t *testing.T) {
		del(t, &corev1.ConfigMap{})
		del(t, &corev1.ServiceAccount{})
		// The foreign ConfigMap and ServiceAccount are not in the operator's cache, so their
		// deletion raises no event: the periodic retry (conflictRetry) notices.
		testenv.Eventually(t, waitTimeout+conflictRetry, func() error {
			cond, err := programmed()
			if err != nil {
				return err
			}
			if cond.Reason == ReasonConflict {
				return fmt.Errorf("Programmed still %s: %q", cond.Reason, cond.Message)
			}
			var gw gwapiv1.Gateway
			if err := get(c, "conflict", "gw", &gw); err != nil {
				return err
			}
			for _, obj := range append(foreign(), &appsv1.Deployment{}) {
				if err := get(c, "conflict", "gw", obj); err != nil {
					return fmt.Errorf("%T: %w", obj, err)
				}
				if !metav1.IsControlledBy(obj, &gw) {
					return fmt.Errorf("%T not controlled by the Gateway", obj)
				}
			}
			return nil
		})
	})
}

// TestCreatedFor: what counts as the operator's own object. Owner and label alike can be
// set by anyone who creates an object, so only both together with the Gateway's name, or the
// Gateway's UID as controller, or STUNner's label with a reference to the Gateway's UID,
// count.
func TestCreatedFor(t *testing.T) {
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "uid-1"}}
	owner := func(name, uid string, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: gwapiv1.GroupVersion.String(), Kind: "Gateway",
			Name: name, UID: types.UID("uid-" + uid), Controller: ptr(controller)}}
	}
	label := map[string]string{render.LabelManagedBy: render.LabelManagedByValue}
	stunner := map[string]string{stunnerOwnedBy: stunnerOwnedByValue}
	tests := []struct {
		name   string
		labels map[string]string
		owners []metav1.OwnerReference
		want   bool
	}{
		{"controlled by the Gateway", nil, owner("g", "1", true), true},
		{"labelled, controlled by an earlier Gateway of the name", label, owner("g", "0", true), true},
		{"no owner, no label", nil, nil, false},
		{"labelled, no owner", label, nil, false},
		{"earlier Gateway of the name, not labelled", nil, owner("g", "0", true), false},
		{"labelled, controlled by another Gateway", label, owner("h", "2", true), false},
		{"labelled, owned but not controlled by the Gateway's name", label, owner("g", "0", false), false},
		{"labelled, controlled by a Deployment", label, []metav1.OwnerReference{{APIVersion: "apps/v1",
			Kind: "Deployment", Name: "g", UID: "uid-9", Controller: ptr(true)}}, false},
		{"STUNner's label, plain owner reference to the Gateway's UID", stunner, owner("g", "1", false), true},
		{"STUNner's label, controller reference to the Gateway's UID", stunner, owner("g", "1", true), true},
		{"STUNner's label, owner reference to another UID of the name", stunner, owner("g", "0", false), false},
		{"STUNner's label, owner reference to another Gateway", stunner, owner("h", "2", false), false},
		{"STUNner's label, no owner", stunner, nil, false},
		{"plain owner reference to the Gateway's UID, no label", nil, owner("g", "1", false), false},
		{"STUNner's label, a Deployment of the Gateway's UID", stunner, []metav1.OwnerReference{{APIVersion: "apps/v1",
			Kind: "Deployment", Name: "g", UID: "uid-1"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g",
				Labels: tt.labels, OwnerReferences: tt.owners}}
			if got := createdFor(cm, gw); got != tt.want {
				t.Errorf("createdFor = %v, want %v", got, tt.want)
			}
		})
	}
}
