package controller

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

const configSourceYAML = `apiVersion: v1
kind: Namespace
metadata: {name: cfgsrc}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: cfgsrc-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: cfgsrc-config, namespace: cfgsrc}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: cfgsrc-config, namespace: cfgsrc}
spec: {dataplane: cfgsrc-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: cfgsrc-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: cfgsrc}
spec:
  gatewayClassName: cfgsrc-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestConfigSourceSwitch: a Gateway whose Dataplane switches to configSource CDS loses the
// Role and RoleBinding that let its pods read the ConfigMap (its pods get no token), keeps its
// ServiceAccount, and gets them back when the Dataplane switches back to ConfigMap.
func TestConfigSourceSwitch(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(configSourceYAML))

	// podsTokenless checks that the Deployment's pods run as the Gateway's ServiceAccount with
	// automountServiceAccountToken false exactly when want is true.
	podsTokenless := func(want bool) error {
		var dep appsv1.Deployment
		if err := get(c, "cfgsrc", "gw", &dep); err != nil {
			return err
		}
		pod := dep.Spec.Template.Spec
		if pod.ServiceAccountName != "gw" {
			return fmt.Errorf("pods run as %q, want the Gateway's ServiceAccount gw", pod.ServiceAccountName)
		}
		got := pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken
		if got != want {
			return fmt.Errorf("pods automountServiceAccountToken %v, want tokenless %v", pod.AutomountServiceAccountToken, want)
		}
		return nil
	}
	granted := func() error {
		if err := podsTokenless(false); err != nil {
			return err
		}
		for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
			if err := get(c, "cfgsrc", "gw", obj); err != nil {
				return fmt.Errorf("%s: %w", kindOf(obj), err)
			}
		}
		return nil
	}
	testenv.Eventually(t, waitTimeout, granted)

	setSource := func(source string) {
		t.Helper()
		var dp stnrv1.Dataplane
		if err := get(c, "", "cfgsrc-dataplane", &dp); err != nil {
			t.Fatal(err)
		}
		orig := dp.DeepCopy()
		dp.Spec.ConfigSource = source
		// A patch: the operator writes the Dataplane's status meanwhile.
		if err := c.Patch(ctx, &dp, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	setSource(render.ConfigSourceCDS)
	testenv.Eventually(t, waitTimeout, func() error {
		if err := podsTokenless(true); err != nil {
			return err
		}
		if err := get(c, "cfgsrc", "gw", &corev1.ServiceAccount{}); err != nil {
			return fmt.Errorf("ServiceAccount: %w", err)
		}
		if err := absent(c, "cfgsrc", "gw", &rbacv1.Role{}); err != nil {
			return err
		}
		return absent(c, "cfgsrc", "gw", &rbacv1.RoleBinding{})
	})

	setSource(render.ConfigSourceConfigMap)
	testenv.Eventually(t, waitTimeout, granted)
}
