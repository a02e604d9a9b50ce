package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

const offloadYAML = `apiVersion: v1
kind: Namespace
metadata: {name: offload}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: offload-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: offload-config, namespace: offload}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: offload-config, namespace: offload}
spec: {dataplane: offload-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: offload-dataplane}
spec: {image: ternd:test, offloadEngine: None}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: offload}
spec:
  gatewayClassName: offload-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// serveReport serves rep at offloadmode.ReportPath on ip, at the port the
// shared operator reads reports at, as a dataplane pod's ternd would.
func serveReport(t *testing.T, ip string, rep offloadmode.Report) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(offloadReportPort)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(offloadmode.ReportPath, func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(rep) })
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestOffloadActiveCondition: the Gateway's OffloadActive condition
// follows what its ready pods report at their health port: False
// NotRequested while the Dataplane asks for no offload, Unknown Pending
// with no ready pod, True when the ready pods attached, False with the
// pod's reason when one fell back, Unknown NoReport when a ready pod does
// not answer. Pods that are not ready, or not the Gateway's, do not count.
// The pods are API objects whose status the test writes (envtest has no
// kubelet) with loopback addresses where the test serves their reports.
func TestOffloadActiveCondition(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	applyYAML(t, c, []byte(offloadYAML))

	want := func(status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		testenv.Eventually(t, waitTimeout, func() error {
			var gw gwapiv1.Gateway
			if err := get(c, "offload", "gw", &gw); err != nil {
				return err
			}
			if err := condition(gw.Status.Conditions, render.ConditionOffloadActive, status, msg); err != nil {
				return err
			}
			if r := meta.FindStatusCondition(gw.Status.Conditions, render.ConditionOffloadActive).Reason; r != reason {
				return fmt.Errorf("OffloadActive reason %s, want %s", r, reason)
			}
			return nil
		})
	}
	want(metav1.ConditionFalse, offloadmode.ReasonNotRequested, "offloadEngine is None")

	applyYAML(t, c, []byte(`apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: offload-dataplane}
spec: {image: ternd:test, offloadEngine: Auto}
`))
	want(metav1.ConditionUnknown, render.ReasonOffloadPending, "no dataplane pod")

	// pod creates a pod of the Gateway (labels as rendered, unless
	// foreign) at ip, ready or not.
	pod := func(name, ip string, ready, foreign bool) {
		t.Helper()
		labels := map[string]string{render.LabelApp: render.LabelAppValue, render.LabelGatewayName: "gw",
			render.LabelGatewayNamespace: "offload", render.LabelManagedBy: render.LabelManagedByValue}
		if foreign {
			labels[render.LabelGatewayName] = "other"
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "offload", Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ternd", Image: "ternd:test"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		zero := int64(0)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "offload"}}
		if err := c.Delete(ctx, p, &client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}

	attached := offloadmode.Report{Requested: offloadmode.Auto, Attached: offloadmode.TC, Active: true, Reason: offloadmode.ReasonAttached,
		Interfaces: map[string]offloadmode.ReportInterface{"eth0": {Hook: "TC", Attach: "tcx", Egress: "same_interface", Why: "single_interface"}}}
	serveReport(t, "127.0.0.2", attached)
	pod("gw-a", "127.0.0.2", true, false)
	want(metav1.ConditionTrue, offloadmode.ReasonAttached, "1 of 1 ready pods relay ChannelData in the kernel; gw-a: eth0 TC (tcx, same_interface)")

	// A pod that is not ready yet, and another Gateway's pod that fell
	// back, change nothing.
	fellBack := offloadmode.Report{Requested: offloadmode.Auto, Attached: offloadmode.None, Reason: offloadmode.ReasonMissingCapability,
		Message: "offload: not supported: load programs: the verifier refuses the programs without CAP_PERFMON"}
	serveReport(t, "127.0.0.3", fellBack)
	pod("gw-b", "127.0.0.3", false, false)
	pod("other-a", "127.0.0.3", true, true)
	want(metav1.ConditionTrue, offloadmode.ReasonAttached, "1 of 1 ready pods")

	// gw-b becomes ready: its fallback makes the condition False.
	var b corev1.Pod
	if err := get(c, "offload", "gw-b", &b); err != nil {
		t.Fatal(err)
	}
	b.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, &b); err != nil {
		t.Fatal(err)
	}
	want(metav1.ConditionFalse, offloadmode.ReasonMissingCapability, "1 of 2 ready pods relay through sockets (gw-b: MissingCapability: offload: not supported")

	// A ready pod nothing answers for: Unknown.
	del("gw-b")
	pod("gw-c", "127.0.0.4", true, false)
	want(metav1.ConditionUnknown, render.ReasonOffloadNoReport, "1 of 2 ready pods did not report")

	del("gw-c")
	want(metav1.ConditionTrue, offloadmode.ReasonAttached, "1 of 1 ready pods")

	applyYAML(t, c, []byte(`apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: offload-dataplane}
spec: {image: ternd:test, offloadEngine: None}
`))
	want(metav1.ConditionFalse, offloadmode.ReasonNotRequested, "offloadEngine is None")
}
