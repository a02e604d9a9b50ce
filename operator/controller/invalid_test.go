package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// invalidBase is a valid hierarchy in namespace NS with class NS-class and GatewayConfig
// NS-config, which each case below breaks in one way. "NS" is replaced with the case's
// namespace; EXTRA with case-specific documents.
const invalidBase = `apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: v1
kind: Secret
metadata: {name: NS-auth, namespace: NS}
stringData: {type: static, username: user, password: pass}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: NS-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: NS-config, namespace: NS}
---
EXTRA
`

const validConfig = `apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-config, namespace: NS}
spec:
  dataplane: NS-dataplane
  authRef: {name: NS-auth, namespace: NS}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: NS-dataplane}
spec: {image: ternd:test}
`

const udpGateway = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: NS}
spec:
  gatewayClassName: NS-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestInvalid applies hierarchies with one thing wrong each (the list, and more) and
// checks that the problem shows up as a condition naming it, and that the operator keeps
// reconciling without an error.
func TestInvalid(t *testing.T) {
	c := op.start(t)
	tests := []struct {
		name  string // also the namespace
		extra string // documents added to invalidBase
		check func(ns string) error
	}{
		{
			name:  "inv-no-config",
			extra: udpGateway, // and no GatewayConfig at all
			check: func(ns string) error {
				if err := classCondition(c, ns+"-class", "Accepted", metav1.ConditionFalse, "GatewayConfig "+ns+"/"+ns+"-config not found"); err != nil {
					return err
				}
				return gatewayCondition(c, ns, "gw", "Accepted", metav1.ConditionFalse, "is not accepted")
			},
		},
		{
			name: "inv-two-configs",
			extra: `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: NS-ambiguous}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: NS-dup}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-dup, namespace: NS}
spec: {authRef: {name: NS-auth}}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-dup, namespace: default}
spec: {authRef: {name: NS-auth, namespace: NS}}
`,
			check: func(ns string) error {
				return classCondition(c, ns+"-ambiguous", "Accepted", metav1.ConditionFalse, "two GatewayConfigs in one hierarchy")
			},
		},
		{
			name: "inv-protocol",
			extra: validConfig + `---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: NS}
spec:
  gatewayClassName: NS-class
  listeners:
  - {name: udp, port: 3478, protocol: TURN-UDP}
  - {name: sctp, port: 3479, protocol: TURN-SCTP}
`,
			check: func(ns string) error {
				if err := gwListenerCondition(c, ns, "gw", "sctp", "Accepted", metav1.ConditionFalse, `unsupported protocol "TURN-SCTP"`); err != nil {
					return err
				}
				// The good listener is still served.
				var cm corev1.ConfigMap
				if err := get(c, ns, "gw", &cm); err != nil {
					return err
				}
				if n := strings.Count(cm.Data["tern.yaml"], "protocol:"); n != 1 {
					return fmt.Errorf("config has %d listeners, want the UDP one only", n)
				}
				return nil
			},
		},
		{
			name: "inv-tls-secret",
			extra: validConfig + `---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: NS}
spec:
  gatewayClassName: NS-class
  listeners:
  - name: tls
    port: 443
    protocol: TURN-TLS
    tls: {mode: Terminate, certificateRefs: [{kind: Secret, name: no-such-cert}]}
`,
			check: func(ns string) error {
				if err := gwListenerCondition(c, ns, "gw", "tls", "ResolvedRefs", metav1.ConditionFalse, ns+"/no-such-cert not found"); err != nil {
					return err
				}
				return gatewayCondition(c, ns, "gw", "Accepted", metav1.ConditionFalse, "no-such-cert")
			},
		},
		{
			name: "inv-dataplane",
			extra: `apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-config, namespace: NS}
spec:
  dataplane: no-such-dataplane
  authRef: {name: NS-auth, namespace: NS}
---
` + udpGateway,
			check: func(ns string) error {
				if err := gatewayCondition(c, ns, "gw", "Programmed", metav1.ConditionFalse, `Dataplane "no-such-dataplane" not found`); err != nil {
					return err
				}
				if err := get(c, ns, "gw", &corev1.ConfigMap{}); err != nil {
					return fmt.Errorf("ConfigMap without a Dataplane: %w", err)
				}
				if err := get(c, ns, "gw", &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("Deployment without a Dataplane: %v, want NotFound", err)
				}
				return nil
			},
		},
		{
			name: "inv-auth-secret",
			extra: `apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-config, namespace: NS}
spec: {authRef: {name: no-such-secret}}
---
` + udpGateway,
			check: func(ns string) error {
				return gatewayCondition(c, ns, "gw", "Accepted", metav1.ConditionFalse, "Secret "+ns+"/no-such-secret not found")
			},
		},
		{
			name: "inv-auth-type",
			extra: `apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: NS-config, namespace: NS}
spec: {authType: kerberos, username: u, password: p}
---
` + udpGateway,
			check: func(ns string) error {
				return gatewayCondition(c, ns, "gw", "Accepted", metav1.ConditionFalse, `unknown auth type "kerberos"`)
			},
		},
		{
			name: "inv-backend",
			extra: validConfig + "---\n" + udpGateway + `---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: route, namespace: NS}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: no-such-service}]}]
`,
			check: func(ns string) error {
				var rt stnrv1.UDPRoute
				if err := get(c, ns, "route", &rt); err != nil {
					return err
				}
				for _, p := range rt.Status.Parents {
					return condition(p.Conditions, "ResolvedRefs", metav1.ConditionFalse, "Service "+ns+"/no-such-service not found")
				}
				return fmt.Errorf("no parent status")
			},
		},
		{
			name: "inv-static-prefix",
			extra: validConfig + "---\n" + udpGateway + `---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: static, namespace: NS}
spec: {prefixes: [10.1.0.0/16, not-a-prefix]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: route, namespace: NS}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: static}]}]
`,
			check: func(ns string) error {
				var ss stnrv1.StaticService
				if err := get(c, ns, "static", &ss); err != nil {
					return err
				}
				if err := condition(ss.Status.Conditions, ConditionValid, metav1.ConditionFalse, "spec.prefixes[1]"); err != nil {
					return err
				}
				// The objects that are fine say so.
				var gc stnrv1.GatewayConfig
				if err := get(c, ns, ns+"-config", &gc); err != nil {
					return err
				}
				return condition(gc.Status.Conditions, ConditionValid, metav1.ConditionTrue, "")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.ReplaceAll(strings.ReplaceAll(invalidBase, "EXTRA", tt.extra), "NS", tt.name)
			applyYAML(t, c, []byte(doc))
			testenv.Eventually(t, waitTimeout, func() error { return tt.check(tt.name) })
		})
	}

	t.Run("reconcile does not fail on invalid input", func(t *testing.T) {
		if _, err := op.rec.Reconcile(context.Background(), renderKey); err != nil {
			t.Errorf("Reconcile = %v, want nil: invalid input must become conditions, not retries", err)
		}
		select {
		case err := <-op.done:
			t.Fatalf("manager stopped: %v", err)
		default:
		}
	})
}

func classCondition(c client.Client, name, typ string, status metav1.ConditionStatus, msg string) error {
	var gc gwapiv1.GatewayClass
	if err := get(c, "", name, &gc); err != nil {
		return err
	}
	return condition(gc.Status.Conditions, typ, status, msg)
}

func gatewayCondition(c client.Client, ns, name, typ string, status metav1.ConditionStatus, msg string) error {
	var gw gwapiv1.Gateway
	if err := get(c, ns, name, &gw); err != nil {
		return err
	}
	return condition(gw.Status.Conditions, typ, status, msg)
}

func gwListenerCondition(c client.Client, ns, name, listener, typ string, status metav1.ConditionStatus, msg string) error {
	var gw gwapiv1.Gateway
	if err := get(c, ns, name, &gw); err != nil {
		return err
	}
	return listenerCondition(&gw, listener, typ, status, msg)
}
