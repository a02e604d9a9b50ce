package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
)

// A ValidatingAdmissionPolicy that refuses every Deployment in the namespace: the API server
// itself refuses the Gateway's Deployment, as a policy engine, an exhausted quota or a webhook
// would in a real cluster.
const applyFailPolicyYAML = `apiVersion: v1
kind: Namespace
metadata: {name: applyfail, labels: {tern-test: applyfail}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: applyfail-no-deployments}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: "false"
    message: no Deployments in this namespace
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: applyfail-no-deployments}
spec:
  policyName: applyfail-no-deployments
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {tern-test: applyfail}
`

const applyFailYAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: applyfail-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: applyfail-config, namespace: applyfail}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: applyfail-config, namespace: applyfail}
spec: {dataplane: applyfail-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: applyfail-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: applyfail}
spec:
  gatewayClassName: applyfail-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestApplyFailureIsNotProgrammed: a Gateway whose Deployment the API server refuses is not
// Programmed: the condition is False with ReasonApplyFailed and names the Deployment, while
// the objects that were written (its ConfigMap) are there.
func TestApplyFailureIsNotProgrammed(t *testing.T) {
	c := op.start(t)
	// The API server is shared by the package's tests, which reconcile every Gateway: take
	// this test's objects away again, the Gateway before the policy that refuses its
	// Deployment.
	var objs []*unstructured.Unstructured
	t.Cleanup(func() {
		for i := len(objs) - 1; i >= 0; i-- {
			if objs[i].GetKind() != "Namespace" { // envtest runs no namespace controller: it would stay Terminating
				_ = c.Delete(context.Background(), objs[i])
			}
		}
	})
	objs = append(objs, applyYAML(t, c, []byte(applyFailPolicyYAML))...)
	// The policy takes effect once the API server has loaded it: wait until it refuses a
	// Deployment of the test's own before the Gateway's is rendered.
	probe := func() *appsv1.Deployment {
		labels := map[string]string{"app": "probe"}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "applyfail"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
				},
			},
		}
	}
	testenv.Eventually(t, waitTimeout, func() error {
		d := probe()
		if err := c.Create(context.Background(), d); err == nil {
			_ = c.Delete(context.Background(), d)
			return errors.New("the admission policy does not refuse Deployments yet")
		}
		return nil
	})
	objs = append(objs, applyYAML(t, c, []byte(applyFailYAML))...)
	testenv.Eventually(t, waitTimeout, func() error {
		var gw gwapiv1.Gateway
		if err := get(c, "applyfail", "gw", &gw); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
		if cond == nil || cond.ObservedGeneration != gw.Generation {
			return fmt.Errorf("no Programmed condition for generation %d: %v", gw.Generation, gw.Status.Conditions)
		}
		if cond.Status != metav1.ConditionFalse || cond.Reason != ReasonApplyFailed {
			return fmt.Errorf("Programmed is %s/%s (%q), want False/%s", cond.Status, cond.Reason, cond.Message, ReasonApplyFailed)
		}
		if !strings.Contains(cond.Message, "Deployment gw") {
			return fmt.Errorf("Programmed message %q does not name the Deployment", cond.Message)
		}
		return nil
	})
	if err := get(c, "applyfail", "gw", &corev1.ConfigMap{}); err != nil {
		t.Errorf("ConfigMap: %v (the objects the API server took are applied)", err)
	}
}
