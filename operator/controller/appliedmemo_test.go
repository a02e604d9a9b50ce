package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// TestAppliedMemo: the memo gives back a hash only for the object rendered with the same
// digest, keeps what a reconcile used, and forgets what it did not use or what failed.
func TestAppliedMemo(t *testing.T) {
	cm := func(data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw"}, Data: map[string]string{"k": data}}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw"}}
	digest := func(obj client.Object) [32]byte {
		d, ok := renderedDigest(obj)
		if !ok {
			t.Fatalf("no digest of %T", obj)
		}
		return d
	}
	var m appliedMemo
	if _, ok := m.hash(cm("a"), digest(cm("a"))); ok {
		t.Fatal("empty memo: hit")
	}
	m.remember(cm("a"), digest(cm("a")), "h1")
	if h, ok := m.hash(cm("a"), digest(cm("a"))); !ok || h != "h1" {
		t.Fatalf("same rendering: got %q, %v; want h1", h, ok)
	}
	if _, ok := m.hash(cm("b"), digest(cm("b"))); ok {
		t.Fatal("changed rendering: hit")
	}
	if _, ok := m.hash(svc, digest(cm("a"))); ok {
		t.Fatal("another kind of the same name: hit")
	}
	m.rotate()
	if _, ok := m.hash(cm("a"), digest(cm("a"))); !ok { // used in this reconcile: kept
		t.Fatal("entry of the last reconcile: miss")
	}
	m.rotate()
	m.rotate() // a reconcile that did not use it
	if _, ok := m.hash(cm("a"), digest(cm("a"))); ok {
		t.Fatal("entry unused for a reconcile: hit")
	}
	m.remember(cm("a"), digest(cm("a")), "h1")
	m.rotate()
	m.forget(cm("a"))
	if _, ok := m.hash(cm("a"), digest(cm("a"))); ok {
		t.Fatal("forgotten entry: hit")
	}

	var rm routeMemo
	name := types.NamespacedName{Namespace: "ns", Name: "r"}
	d1, _ := parentsDigest([]gwapiv1.RouteParentStatus{{ParentRef: gwapiv1.ParentReference{Name: "gw"}}})
	d2, _ := parentsDigest([]gwapiv1.RouteParentStatus{{ParentRef: gwapiv1.ParentReference{Name: "gw2"}}})
	rm.remember(stnrv1.GroupName, name, "7", d1)
	for _, tc := range []struct {
		group, rv string
		d         [32]byte
		want      bool
	}{
		{stnrv1.GroupName, "7", d1, true},
		{stnrv1.GroupName, "8", d1, false}, // written since, by anyone
		{stnrv1.GroupName, "7", d2, false}, // rendered otherwise
		{gwapiv1.GroupName, "7", d1, false},
	} {
		if got := rm.upToDate(tc.group, name, tc.rv, tc.d); got != tc.want {
			t.Errorf("upToDate(%s, rv %s) = %v, want %v", tc.group, tc.rv, got, tc.want)
		}
	}
}

const memoYAML = `apiVersion: v1
kind: Namespace
metadata: {name: memo}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: memo-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: memo-config, namespace: memo}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: memo-config, namespace: memo}
spec: {dataplane: memo-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: memo-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: memo}
spec:
  gatewayClassName: memo-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: sfu, namespace: memo}
spec: {clusterIP: None, ports: [{port: 7882, protocol: UDP}]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: memo}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: sfu}]}]
`

// TestMemoKeepsRepairing: with nothing rendered differently (so the memos answer for every
// object and route), what someone else changed is still put back: a Service whose hash
// annotation was removed is applied again, and a route whose status lost this controller's
// entry gets it back at the next render.
func TestMemoKeepsRepairing(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(memoYAML))
	var hash string
	testenv.Eventually(t, waitTimeout, func() error {
		var svc corev1.Service
		if err := get(c, "memo", "gw", &svc); err != nil {
			return err
		}
		if hash = svc.Annotations[HashAnnotation]; hash == "" {
			return fmt.Errorf("Service without %s", HashAnnotation)
		}
		var rt stnrv1.UDPRoute
		if err := get(c, "memo", "media", &rt); err != nil {
			return err
		}
		if len(rt.Status.Parents) != 1 {
			return fmt.Errorf("route parents %v, want one", rt.Status.Parents)
		}
		return nil
	})

	t.Run("hash annotation removed", func(t *testing.T) {
		var svc corev1.Service
		if err := get(c, "memo", "gw", &svc); err != nil {
			t.Fatal(err)
		}
		delete(svc.Annotations, HashAnnotation)
		if err := c.Update(ctx, &svc); err != nil { // a Service event: a render
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var again corev1.Service
			if err := get(c, "memo", "gw", &again); err != nil {
				return err
			}
			if got := again.Annotations[HashAnnotation]; got != hash {
				return fmt.Errorf("hash annotation %q, want %q", got, hash)
			}
			return nil
		})
	})

	t.Run("route status emptied", func(t *testing.T) {
		var rt stnrv1.UDPRoute
		if err := get(c, "memo", "media", &rt); err != nil {
			t.Fatal(err)
		}
		want := rt.Status.Parents
		rt.Status.Parents = []gwapiv1.RouteParentStatus{}
		if err := c.Status().Update(ctx, &rt); err != nil { // status only: no render
			t.Fatal(err)
		}
		// A Secret event renders every Gateway again, each the same as before.
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "memo", Name: "unrelated"}}
		if err := c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var again stnrv1.UDPRoute
			if err := get(c, "memo", "media", &again); err != nil {
				return err
			}
			if len(again.Status.Parents) != len(want) || len(want) == 0 ||
				again.Status.Parents[0].ControllerName != want[0].ControllerName {
				return fmt.Errorf("route parents %v, want %v", again.Status.Parents, want)
			}
			return nil
		})
	})
}
