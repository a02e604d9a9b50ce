package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

const daemonSetYAML = `apiVersion: v1
kind: Namespace
metadata: {name: dskind}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: dskind-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: dskind-config, namespace: dskind}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: dskind-config, namespace: dskind}
spec: {dataplane: dskind-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: dskind-dataplane}
spec: {image: ternd:test, dataplaneResource: DaemonSet, hostNetwork: true, terminationGracePeriodSeconds: 90}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: dskind
  labels: {env: prod, argocd.argoproj.io/instance: media}
  annotations: {example.com/owner: media-team}
spec:
  gatewayClassName: dskind-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestDataplaneResourceSwitch: a Dataplane with dataplaneResource DaemonSet gets the Gateway
// a DaemonSet (hostNetwork, the grace period, STUNner's labels, annotations and environment)
// and no Deployment; switching the Dataplane to Deployment replaces the DaemonSet by a
// Deployment, and back. The Gateway's labels reach the workload as they change.
func TestDataplaneResourceSwitch(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(daemonSetYAML))

	var ds appsv1.DaemonSet
	testenv.Eventually(t, waitTimeout, func() error { return get(c, "dskind", "gw", &ds) })
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 90 {
		t.Errorf("DaemonSet pods: hostNetwork %v, grace period %v; want true and 90", pod.HostNetwork, pod.TerminationGracePeriodSeconds)
	}
	if got := ds.Labels; got["env"] != "prod" || got["argocd.argoproj.io/instance"] != "" ||
		got[render.LabelOwnedBy] != render.LabelOwnedByValue || got[render.LabelManagedBy] != render.LabelManagedByValue {
		t.Errorf("DaemonSet labels %v: want the Gateway's env, not its argocd label, owned-by and managed-by", got)
	}
	if got := ds.Annotations; got["example.com/owner"] != "media-team" || got[render.AnnotationRelatedGateway] != "dskind/gw" {
		t.Errorf("DaemonSet annotations %v", got)
	}
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	for k, v := range map[string]string{render.EnvAddr: "fieldRef:status.podIP", render.EnvName: "gw", render.EnvNamespace: "dskind",
		render.EnvNodeName: "fieldRef:spec.nodeName", render.EnvConfigOrigin: "http://stunner-config-discovery." + testCDSNamespace + ".svc:13478"} {
		if env[k] != v {
			t.Errorf("DaemonSet pods: %s=%q, want %q", k, env[k], v)
		}
	}
	if err := absent(c, "dskind", "gw", &appsv1.Deployment{}); err != nil {
		t.Error(err)
	}

	setResource := func(kind string) {
		t.Helper()
		var dp stnrv1.Dataplane
		if err := get(c, "", "dskind-dataplane", &dp); err != nil {
			t.Fatal(err)
		}
		orig := dp.DeepCopy()
		dp.Spec.DataplaneResource = &kind
		// A patch: the operator writes the Dataplane's status meanwhile.
		if err := c.Patch(ctx, &dp, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	setResource(render.DataplaneResourceDeployment)
	testenv.Eventually(t, waitTimeout, func() error {
		if err := get(c, "dskind", "gw", &appsv1.Deployment{}); err != nil {
			return err
		}
		return absent(c, "dskind", "gw", &appsv1.DaemonSet{})
	})

	var gw gwapiv1.Gateway
	if err := get(c, "dskind", "gw", &gw); err != nil {
		t.Fatal(err)
	}
	orig := gw.DeepCopy()
	gw.Labels["team"] = "media"
	if err := c.Patch(ctx, &gw, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func() error {
		var dep appsv1.Deployment
		if err := get(c, "dskind", "gw", &dep); err != nil {
			return err
		}
		if dep.Labels["team"] != "media" {
			return fmt.Errorf("Deployment labels %v lack the Gateway's new label team=media", dep.Labels)
		}
		return nil
	})

	setResource(render.DataplaneResourceDaemonSet)
	testenv.Eventually(t, waitTimeout, func() error {
		if err := get(c, "dskind", "gw", &appsv1.DaemonSet{}); err != nil {
			return err
		}
		return absent(c, "dskind", "gw", &appsv1.Deployment{})
	})
}

// absent returns nil when namespace/name of obj's kind does not exist, or is being deleted
// (envtest runs no garbage collector to finish foreground deletions).
func absent(c client.Client, namespace, name string, obj client.Object) error {
	err := get(c, namespace, name, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case obj.GetDeletionTimestamp() != nil:
		return nil
	}
	return errors.New(kindOf(obj) + " " + namespace + "/" + name + " still exists")
}
