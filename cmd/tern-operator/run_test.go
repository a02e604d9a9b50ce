package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/controller"
)

var env = testenv.New(testenv.Options{CRDPaths: testenv.MustDeployCRDPaths()})

func TestMain(m *testing.M) {
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

func TestOperateUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown flag", []string{"--no-such-flag"}, "flag provided but not defined"},
		{"extra argument", []string{"extra"}, "usage: tern-operator [run]"},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"bad auth public address", []string{"--auth-public-addr", "not an address"}, "--auth-public-addr"},
		{"negative auth rate limit", []string{"--auth-rate-limit", "-1"}, "--auth-rate-limit"},
		{"zero auth burst", []string{"--auth-rate-burst", "0"}, "--auth-rate-burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := operate(context.Background(), tt.args, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tt.want)
			}
		})
	}
}

// operateManifests is a Gateway for TestOperate: everything the operator renders per Gateway
// (ConfigMap, Deployment, Service, and the ServiceAccount, Role and RoleBinding of its pods).
const operateManifests = `apiVersion: v1
kind: Namespace
metadata: {name: operate}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: operate-full-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: operate-config, namespace: operate}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata:
  name: operate-config
  namespace: operate
  # Static credentials are served by the auth service only with this opt-in.
  annotations: {tern-gw.io/serve-static-credentials: "true"}
spec: {dataplane: operate-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: operate-dataplane}
spec: {image: ternd:test, configSource: ConfigMap}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: operate}
spec:
  gatewayClassName: operate-full-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: media, namespace: operate}
spec: {prefixes: [10.1.2.0/24]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: operate}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: media}]}]
`

// TestOperate runs the controller mode the way the operator Deployment does, against a real
// API server and with no more rights than deploy/rbac grants its ServiceAccount: it must win
// leader election, serve health and metrics, render a Gateway into every object it owns,
// write status, and stop cleanly on cancel.
func TestOperate(t *testing.T) {
	cfg := env.Config(t)
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	// What `kubectl apply -k deploy/` installs for the operator's identity.
	for _, f := range []string{"namespace.yaml", "rbac/serviceaccount.yaml", "rbac/clusterrole.yaml",
		"rbac/clusterrolebinding.yaml", "rbac/leader-election.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Apply(t, c, data)
	}
	kubeconfig := env.ImpersonatingKubeconfig(t, "system:serviceaccount:tern-system:tern-operator")
	metricsAddr, healthAddr, authAddr, cdsAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testenv.LockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- operate(ctx, []string{"--kubeconfig", kubeconfig, "--leader-election-namespace", "tern-system",
			"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", healthAddr, "--auth-addr", authAddr,
			"--config-discovery-address", cdsAddr}, &stderr)
	}()
	defer func() {
		if t.Failed() {
			t.Logf("operator log:\n%s", stderr.String())
		}
	}()

	for _, path := range []string{"/healthz", "/readyz"} {
		testenv.Eventually(t, 30*time.Second, func() error { return httpOK("http://"+healthAddr+path, "") })
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: "tern-system", Name: "tern-operator.stunner.l7mp.io"}, &lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease has no holder")
		}
		return nil
	})

	gc := &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "operate-class"},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: "stunner.l7mp.io/gateway-operator"},
	}
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	// No parametersRef: the class is reconciled and refused with a reason.
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(gc), gc); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(gc.Status.Conditions, "Accepted")
		if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "parametersRef") {
			return fmt.Errorf("Accepted = %+v, want False naming parametersRef", cond)
		}
		return nil
	})

	// A whole Gateway: every object it renders must be written under the shipped RBAC. Its
	// Dataplane is in ConfigMap mode so that those include the Role and RoleBinding.
	testenv.Apply(t, c, []byte(operateManifests))
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.Service{},
		&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		testenv.Eventually(t, 30*time.Second, func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: "operate", Name: "gw"}, obj)
		})
	}
	// The leader serves the Gateway's config over the config discovery service.
	testenv.Eventually(t, 30*time.Second, func() error {
		return httpOK("http://"+cdsAddr+"/api/v1/configs/operate/gw", `"name":"operate/gw"`)
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		var gw gwapiv1.Gateway
		if err := c.Get(ctx, client.ObjectKey{Namespace: "operate", Name: "gw"}, &gw); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(gw.Status.Conditions, "Accepted"); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("Gateway Accepted = %+v, want True", cond)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error { return httpOK("http://"+metricsAddr+"/metrics", "controller_runtime_reconcile_total") })
	// The auth service answers from the cache under the shipped RBAC: the Gateway has no
	// address (no load balancer here), so only a request that gives one gets credentials.
	testenv.Eventually(t, 30*time.Second, func() error {
		return httpStatus("http://"+authAddr+"/ice?service=turn&namespace=operate", http.StatusNotFound, "Gateway operate/gw: no public address yet")
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		return httpOK("http://"+authAddr+"/?service=turn&namespace=operate&public-addr=192.0.2.1",
			`{"username":"user","password":"pass","ttl":86400,"uris":["turn:192.0.2.1:3478?transport=udp"]}`)
	})
	// The operator's own metrics (docs/metrics.md): reconcile counts by result, errors and
	// durations of its controller.
	testenv.Eventually(t, 30*time.Second, func() error { return reconcileMetrics("http://" + metricsAddr + "/metrics") })
	// STUNner's operator metrics, counted for the Gateway above.
	testenv.Eventually(t, 30*time.Second, func() error { return stunnerMetrics("http://"+metricsAddr+"/metrics", "Deployment") })

	// The Dataplane switched to a DaemonSet, under the shipped RBAC: the DaemonSet replaces
	// the Deployment, and its creation is counted.
	var dp stnrv1.Dataplane
	if err := c.Get(ctx, client.ObjectKey{Name: "operate-dataplane"}, &dp); err != nil {
		t.Fatal(err)
	}
	orig := dp.DeepCopy()
	dp.Spec.DataplaneResource = ptr("DaemonSet")
	if err := c.Patch(ctx, &dp, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "operate", Name: "gw"}, &appsv1.DaemonSet{}); err != nil {
			return err
		}
		var dep appsv1.Deployment
		switch err := c.Get(ctx, client.ObjectKey{Namespace: "operate", Name: "gw"}, &dep); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case dep.DeletionTimestamp != nil:
			return nil
		}
		return errors.New("the Deployment is still there beside the DaemonSet")
	})
	testenv.Eventually(t, 30*time.Second, func() error { return stunnerMetrics("http://"+metricsAddr+"/metrics", "DaemonSet") })
	if strings.Contains(stderr.String(), "forbidden") {
		t.Errorf("the operator was refused something under deploy/rbac:\n%s", stderr.String())
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after cancel, want 0", code)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("operator did not stop within 45s of cancel")
	}
}

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpOK checks that url answers 200 with a body containing want.
// reconcileMetrics checks that url serves the controller's reconcile count (successes > 0),
// error count and duration histogram (observations > 0), as Prometheus parses them.
func reconcileMetrics(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return err
	}
	ours := func(m *dto.Metric, extra ...string) bool {
		want := map[string]string{"controller": "tern-operator"}
		for i := 0; i+1 < len(extra); i += 2 {
			want[extra[i]] = extra[i+1]
		}
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		return n == len(want)
	}
	find := func(name string, typ dto.MetricType, extra ...string) (*dto.Metric, error) {
		f := fams[name]
		if f == nil || f.GetType() != typ {
			return nil, fmt.Errorf("%s: %v, want a %v", name, f.GetType(), typ)
		}
		for _, m := range f.GetMetric() {
			if ours(m, extra...) {
				return m, nil
			}
		}
		return nil, fmt.Errorf("%s has no series of controller tern-operator %v", name, extra)
	}
	if m, err := find("controller_runtime_reconcile_total", dto.MetricType_COUNTER, "result", "success"); err != nil {
		return err
	} else if m.GetCounter().GetValue() == 0 {
		return errors.New("controller_runtime_reconcile_total{result=success} is 0")
	}
	if _, err := find("controller_runtime_reconcile_errors_total", dto.MetricType_COUNTER); err != nil {
		return err
	}
	if m, err := find("controller_runtime_reconcile_time_seconds", dto.MetricType_HISTOGRAM); err != nil {
		return err
	} else if m.GetHistogram().GetSampleCount() == 0 {
		return errors.New("controller_runtime_reconcile_time_seconds has no observations")
	}
	return nil
}

// stunnerMetrics checks that url serves STUNner's stunner_gateway_operator_* metrics with
// their types and labels, counted: renders and updates done and timed, the creation of a
// workload of kind and ConfigMap applies, a Gateway status written, events passed, the
// generations, and the loops' heartbeats since the test began.
func stunnerMetrics(url, kind string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return err
	}
	value := func(name string, typ dto.MetricType, labels ...string) (float64, error) {
		f := fams["stunner_gateway_operator_"+name]
		if f == nil || f.GetType() != typ {
			return 0, fmt.Errorf("stunner_gateway_operator_%s: %v, want a %v", name, f.GetType(), typ)
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if len(have) != len(labels)/2 {
				return 0, fmt.Errorf("stunner_gateway_operator_%s has labels %v, want %v", name, have, labels)
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch typ {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), nil
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), nil
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), nil
			}
		}
		return 0, fmt.Errorf("stunner_gateway_operator_%s has no series %v", name, labels)
	}
	positive := []struct {
		name   string
		typ    dto.MetricType
		labels []string
	}{
		{"render_total", dto.MetricType_COUNTER, nil},
		{"render_time_seconds", dto.MetricType_HISTOGRAM, nil},
		{"update_total", dto.MetricType_COUNTER, []string{"result", "success"}},
		{"update_time_seconds", dto.MetricType_HISTOGRAM, nil},
		{"resource_operations_total", dto.MetricType_COUNTER, []string{"scope", "spec", "kind", kind, "operation", "attempt"}},
		{"resource_operations_total", dto.MetricType_COUNTER, []string{"scope", "spec", "kind", kind, "operation", "created"}},
		{"resource_operations_total", dto.MetricType_COUNTER, []string{"scope", "spec", "kind", "ConfigMap", "operation", "attempt"}},
		{"resource_operations_total", dto.MetricType_COUNTER, []string{"scope", "status", "kind", "Gateway", "operation", "updated"}},
		{"reconcile_events_total", dto.MetricType_COUNTER, []string{"result", "passed"}},
		{"generation", dto.MetricType_GAUGE, nil},
		{"generation_last_acked", dto.MetricType_GAUGE, nil},
	}
	for _, p := range positive {
		v, err := value(p.name, p.typ, p.labels...)
		if err != nil {
			return err
		}
		if v <= 0 {
			return fmt.Errorf("stunner_gateway_operator_%s%v is %v, want > 0", p.name, p.labels, v)
		}
	}
	if _, err := value("update_errors_total", dto.MetricType_COUNTER); err != nil {
		return err
	}
	gen, _ := value("generation", dto.MetricType_GAUGE)
	if acked, _ := value("generation_last_acked", dto.MetricType_GAUGE); acked > gen {
		return fmt.Errorf("generation_last_acked %v is past generation %v", acked, gen)
	}
	for _, loop := range []string{"operator", "renderer", "updater"} {
		v, err := value(loop+"_loop_last_active_timestamp_seconds", dto.MetricType_GAUGE)
		if err != nil {
			return err
		}
		if v < float64(testStart.Unix()) {
			return fmt.Errorf("%s loop last active at %v, before the test began (%v)", loop, v, testStart.Unix())
		}
	}
	return nil
}

// testStart is when the test binary started.
var testStart = time.Now()

func httpOK(url, want string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	if !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: body lacks %q", url, want)
	}
	return nil
}

// httpStatus checks that url answers code with a body containing want.
func httpStatus(url string, code int, want string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %s: %s; want %d with %q", url, resp.Status, body, code, want)
	}
	return nil
}
