package controller

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

const lifecycleYAML = `apiVersion: v1
kind: Namespace
metadata: {name: life}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: life-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: life-config, namespace: life}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: life-other-class}
spec:
  controllerName: example.com/another-operator
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: life-config, namespace: life}
spec: {dataplane: life-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: life-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: life}
spec:
  gatewayClassName: life-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestLifecycle follows the objects of one Gateway through the changes the operator must
// handle besides rendering: deletion of an owned object, an autoscaler taking the replica
// count, the Gateway moving to another controller's class and back, and the Gateway's deletion.
func TestLifecycle(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(lifecycleYAML))
	rendered := func() []client.Object {
		return []client.Object{&corev1.ConfigMap{}, &corev1.Service{}, &appsv1.Deployment{}}
	}
	allThere := func() error {
		for _, obj := range rendered() {
			if err := get(c, "life", "gw", obj); err != nil {
				return fmt.Errorf("%T: %w", obj, err)
			}
		}
		return nil
	}
	allGone := func() error {
		for _, obj := range rendered() {
			if err := get(c, "life", "gw", obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T: got %v, want NotFound", obj, err)
			}
		}
		return nil
	}
	testenv.Eventually(t, waitTimeout, allThere)

	t.Run("deleted ConfigMap recreated", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := get(c, "life", "gw", &cm); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var again corev1.ConfigMap
			if err := get(c, "life", "gw", &again); err != nil {
				return err
			}
			if again.UID == cm.UID {
				return fmt.Errorf("still the deleted ConfigMap")
			}
			return nil
		})
	})

	t.Run("edited ConfigMap restored", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := get(c, "life", "gw", &cm); err != nil {
			t.Fatal(err)
		}
		rendered := cm.Data
		cm.Data = map[string]string{"tern.yaml": "version: v1\n"}
		if err := c.Update(ctx, &cm); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var again corev1.ConfigMap
			if err := get(c, "life", "gw", &again); err != nil {
				return err
			}
			if !reflect.DeepEqual(again.Data, rendered) {
				return fmt.Errorf("ConfigMap data still edited")
			}
			return nil
		})
	})

	t.Run("replicas left to an autoscaler", func(t *testing.T) {
		var dep appsv1.Deployment
		if err := get(c, "life", "gw", &dep); err != nil {
			t.Fatal(err)
		}
		dep.Spec.Replicas = ptr(int32(3))
		if err := c.Update(ctx, &dep, client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
			t.Fatal(err)
		}
		// Change the template so the operator applies the Deployment again.
		var dp stnrv1.Dataplane
		if err := get(c, "", "life-dataplane", &dp); err != nil {
			t.Fatal(err)
		}
		dp.Spec.Env = []corev1.EnvVar{{Name: "TERN_TEST", Value: "1"}}
		if err := c.Update(ctx, &dp); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error {
			var d appsv1.Deployment
			if err := get(c, "life", "gw", &d); err != nil {
				return err
			}
			found := false
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				found = found || e.Name == "TERN_TEST"
			}
			if !found {
				return fmt.Errorf("Deployment not re-applied with the Dataplane's new env")
			}
			if r := d.Spec.Replicas; r == nil || *r != 3 {
				return fmt.Errorf("replicas = %v, want the autoscaler's 3", r)
			}
			return nil
		})
	})

	setClass := func(t *testing.T, class string) {
		t.Helper()
		var gw gwapiv1.Gateway
		if err := get(c, "life", "gw", &gw); err != nil {
			t.Fatal(err)
		}
		gw.Spec.GatewayClassName = gwapiv1.ObjectName(class)
		if err := c.Update(ctx, &gw); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("Gateway moved to another controller's class", func(t *testing.T) {
		setClass(t, "life-other-class")
		testenv.Eventually(t, waitTimeout, allGone)
	})
	t.Run("Gateway moved back", func(t *testing.T) {
		setClass(t, "life-class")
		testenv.Eventually(t, waitTimeout, allThere)
	})
	t.Run("Gateway deleted", func(t *testing.T) {
		// envtest runs no garbage collector, so this shows the operator's own pruning; in a
		// cluster the owner references (checked in TestSeeds) have the same effect.
		var gw gwapiv1.Gateway
		if err := get(c, "life", "gw", &gw); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &gw); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, allGone)
	})
}
