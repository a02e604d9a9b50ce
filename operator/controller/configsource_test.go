package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
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
spec: {image: ternd:test, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: cfgsrc}
spec:
  gatewayClassName: cfgsrc-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// TestConfigSourceSwitch: a Gateway whose Dataplane in ConfigMap mode switches to CDS (its
// configSource removed: CDS is the default) loses the Role and RoleBinding that let its pods
// read the ConfigMap (its pods get no token), keeps its ServiceAccount, and gets them back
// when the Dataplane switches back to ConfigMap.
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
	setSource("") // the default
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

const cdsOriginYAML = `apiVersion: v1
kind: Namespace
metadata: {name: cdsorigin}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: cdsorigin-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: cdsorigin-config, namespace: cdsorigin}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: cdsorigin-config, namespace: cdsorigin}
spec: {dataplane: cdsorigin-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: cdsorigin-dataplane}
spec: {image: ternd:test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: cdsorigin}
spec:
  gatewayClassName: cdsorigin-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// cdsServiceYAML is the Service stunner-config-discovery in the test operator's
// ConfigDiscoveryNamespace, as the chart installs it.
const cdsServiceYAML = `apiVersion: v1
kind: Namespace
metadata: {name: ` + testCDSNamespace + `}
---
apiVersion: v1
kind: Service
metadata: {name: stunner-config-discovery, namespace: ` + testCDSNamespace + `}
spec:
  selector: {app.kubernetes.io/name: tern-operator}
  ports: [{name: cds, port: 13478, targetPort: cds, protocol: TCP}]
`

// TestConfigDiscoveryOriginFollowsService: the pods of a Dataplane without configSource take
// their config from the config discovery service, named by the DNS name of the Service
// stunner-config-discovery of the operator's namespace while there is no such Service, by
// its ClusterIP (allocated by the API server) once it exists, by the new ClusterIP when it is
// recreated, and by the DNS name again when it is deleted: each change of the Service renders
// the Deployment again.
func TestConfigDiscoveryOriginFollowsService(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(cdsOriginYAML))
	dnsName := "http://stunner-config-discovery." + testCDSNamespace + ".svc:13478"

	origin := func(want string) func() error {
		return func() error {
			var dep appsv1.Deployment
			if err := get(c, "cdsorigin", "gw", &dep); err != nil {
				return err
			}
			pod := dep.Spec.Template.Spec
			if a := pod.AutomountServiceAccountToken; a == nil || *a {
				return fmt.Errorf("pods automountServiceAccountToken %v, want false", a)
			}
			args := pod.Containers[0].Args
			if len(args) < 2 || args[len(args)-2] != "-c" || args[len(args)-1] != want {
				return fmt.Errorf("args %q, want -c %s", args, want)
			}
			for _, e := range pod.Containers[0].Env {
				if e.Name == render.EnvConfigOrigin && e.Value != want {
					return fmt.Errorf("%s %q, want %q", e.Name, e.Value, want)
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, waitTimeout, origin(dnsName))

	clusterIP := func() string {
		t.Helper()
		var svc corev1.Service
		if err := get(c, testCDSNamespace, render.ConfigDiscoveryService, &svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP == "" {
			t.Fatal("the API server allocated no ClusterIP")
		}
		return svc.Spec.ClusterIP
	}
	deleteService := func() {
		t.Helper()
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = testCDSNamespace, render.ConfigDiscoveryService
		if err := c.Delete(ctx, svc); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, func() error { return absent(c, testCDSNamespace, svc.Name, &corev1.Service{}) })
	}
	t.Cleanup(func() {
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = testCDSNamespace, render.ConfigDiscoveryService
		_ = c.Delete(context.Background(), svc)
	})

	applyYAML(t, c, []byte(cdsServiceYAML))
	first := clusterIP()
	testenv.Eventually(t, waitTimeout, origin("http://"+net.JoinHostPort(first, "13478")))

	// Recreated with another ClusterIP, asked for (the allocator may hand the freed one back):
	// the first free address after the first one.
	deleteService()
	ip, err := netip.ParseAddr(first)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		ip = ip.Next()
		svc := &corev1.Service{Spec: corev1.ServiceSpec{
			ClusterIP: ip.String(),
			Selector:  map[string]string{"app.kubernetes.io/name": "tern-operator"},
			Ports:     []corev1.ServicePort{{Name: "cds", Port: 13478, Protocol: corev1.ProtocolTCP}},
		}}
		svc.Namespace, svc.Name = testCDSNamespace, render.ConfigDiscoveryService
		err := c.Create(ctx, svc)
		if err == nil {
			break
		}
		if i == 20 || !strings.Contains(err.Error(), "already allocated") {
			t.Fatalf("recreating Service %s with ClusterIP %s: %v", svc.Name, ip, err)
		}
	}
	second := clusterIP()
	if second == first {
		t.Fatalf("the recreated Service has the same ClusterIP %s", first)
	}
	testenv.Eventually(t, waitTimeout, origin("http://"+net.JoinHostPort(second, "13478")))

	deleteService()
	testenv.Eventually(t, waitTimeout, origin(dnsName))
}
