package controller

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/operator/cds"
	"github.com/tern-gw/tern/operator/render"
)

// dataplanePod creates a pod labelled as render labels gateway's pods, in namespace ns, and
// sets its status (phase, podIPs; hostIPs too under hostNetwork) through the status
// subresource, as the kubelet would.
func dataplanePod(t *testing.T, c client.Client, ns, name, gateway, gatewayNS string, hostNetwork bool, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			render.LabelApp: render.LabelAppValue, render.LabelGatewayName: gateway,
			render.LabelGatewayNamespace: gatewayNS, render.LabelManagedBy: render.LabelManagedByValue}},
		Spec: corev1.PodSpec{HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "ternd", Image: "ternd"}}},
	}
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	setPodStatus(t, c, pod, phase, ips...)
	return pod
}

func setPodStatus(t *testing.T, c client.Client, pod *corev1.Pod, phase corev1.PodPhase, ips ...string) {
	t.Helper()
	pod.Status = corev1.PodStatus{Phase: phase}
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		if pod.Spec.HostNetwork {
			pod.Status.HostIPs = append(pod.Status.HostIPs, corev1.HostIP{IP: ip})
		}
	}
	if len(ips) > 0 {
		pod.Status.PodIP = ips[0]
		if pod.Spec.HostNetwork {
			pod.Status.HostIP = ips[0]
		}
	}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("status of pod %s: %v", pod.Name, err)
	}
}

// from is an HTTP client and WebSocket dialer whose connections come from src, a loopback
// address other than 127.0.0.1 standing for a pod's IP.
type from struct {
	src  string
	http *http.Client
	ws   *websocket.Dialer
}

func newFrom(src string) *from {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
	return &from{src: src,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}},
		ws:   &websocket.Dialer{NetDialContext: d.DialContext, HandshakeTimeout: 30 * time.Second}}
}

func (f *from) get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := f.http.Get(url)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", url, f.src, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// list returns the admin names of the configs a list answers.
func (f *from) list(t *testing.T, url string) []string {
	t.Helper()
	code, body := f.get(t, url)
	var l struct {
		Items []struct{ Admin struct{ Name string } }
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil || code != 200 {
		t.Fatalf("list %s from %s: %d %s (%v)", url, f.src, code, body, err)
	}
	names := []string{}
	for _, it := range l.Items {
		names = append(names, it.Admin.Name)
	}
	return names
}

func (f *from) watch(addr, path string) (*websocket.Conn, int, error) {
	h := http.Header{}
	h.Set("Origin", "http://"+addr)
	conn, resp, err := f.ws.Dial("ws://"+addr+path+"?watch=true", h)
	code := 0
	if resp != nil {
		code = resp.StatusCode
	}
	return conn, code, err
}

func cdsConfig(id, v string) []byte {
	return []byte(`{"version":"v1","admin":{"name":"` + id + `"},"auth":{"type":"static","realm":"` + v + `"}}`)
}

// waitGateways waits until the pod index tells ip's Gateways as want: the cache follows the
// API server's pods asynchronously.
func waitGateways(t *testing.T, ip string, want ...string) {
	t.Helper()
	var got []string
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = op.pods.Gateways(context.Background(), netip.MustParseAddr(ip)); err == nil && slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("Gateways(%s) = %v (%v), want %v", ip, got, err, want)
}

// TestConfigDiscoveryClients serves the config discovery service with the operator's pod
// index and drives it over real HTTP and WebSocket connections from 127.0.0.x addresses
// standing for pod IPs: a client gets the configs of the Gateways it is a running pod of
// (Pending with its IP counts, finished or deleted does not),
// 403 or a list without the others, and 127.0.0.1 (a port-forward) everything.
func TestConfigDiscoveryClients(t *testing.T) {
	c := op.start(t)
	ctx := context.Background()
	const ns = "cds-clients"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// gw1's pod at 127.0.0.2 (and an IPv6 address); gw2's, pending without an IP yet; a pod
	// at 127.0.0.4 whose labels name a Gateway of another namespace; two hostNetwork pods, of
	// gw1 and gw3, on the node at 127.0.0.5.
	p1 := dataplanePod(t, c, ns, "gw1-a", "gw1", ns, false, corev1.PodRunning, "127.0.0.2", "fd00::2")
	p2 := dataplanePod(t, c, ns, "gw2-a", "gw2", ns, false, corev1.PodPending)
	dataplanePod(t, c, ns, "forged", "gwx", "other", false, corev1.PodRunning, "127.0.0.4")
	dataplanePod(t, c, ns, "gw1-host", "gw1", ns, true, corev1.PodRunning, "127.0.0.5")
	dataplanePod(t, c, ns, "gw3-host", "gw3", ns, true, corev1.PodRunning, "127.0.0.5")
	waitGateways(t, "127.0.0.2", ns+"/gw1")
	waitGateways(t, "fd00::2", ns+"/gw1")
	waitGateways(t, "127.0.0.5", ns+"/gw1", ns+"/gw3")
	waitGateways(t, "127.0.0.4")
	// An address no dataplane pod has gets the Gateways with hostNetwork pods (their
	// connections arrive masqueraded, from a node address no object names).
	waitGateways(t, "127.0.0.3", ns+"/gw1", ns+"/gw3")

	store := cds.NewStore()
	ids := []string{ns + "/gw1", ns + "/gw2", ns + "/gw3", "other/gwx"}
	configs := map[string][]byte{}
	for _, id := range ids {
		configs[id] = cdsConfig(id, "v1")
	}
	store.Update(configs, nil)
	srv, err := cds.Listen("127.0.0.1:0", cds.NewHandler(store, op.pods, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := srv.Addr().String()
	base := "http://" + addr + "/api/v1/configs"

	pod1, pending, forged, node, portForward := newFrom("127.0.0.2"), newFrom("127.0.0.3"), newFrom("127.0.0.4"), newFrom("127.0.0.5"), newFrom("127.0.0.1")
	for _, c := range []struct {
		f    *from
		path string
		code int
	}{
		{pod1, "/" + ns + "/gw1", 200}, {pod1, "/" + ns + "/gw2", 403}, {pod1, "/other/gwx", 403},
		{pending, "/" + ns + "/gw2", 403}, {forged, "/other/gwx", 403}, {forged, "/" + ns + "/gw1", 403},
		{node, "/" + ns + "/gw3", 200}, {node, "/" + ns + "/gw1", 200}, {node, "/" + ns + "/gw2", 403},
		{portForward, "/other/gwx", 200}, {portForward, "/" + ns + "/gw2", 200},
		{pod1, "/" + ns + "/missing", 403},
	} {
		if code, body := c.f.get(t, base+c.path); code != c.code {
			t.Errorf("GET %s from %s: %d %s, want %d", c.path, c.f.src, code, body, c.code)
		} else if code == 403 && !strings.Contains(body, `"code":403`) {
			t.Errorf("GET %s from %s: 403 body %s", c.path, c.f.src, body)
		}
	}
	for _, c := range []struct {
		f    *from
		path string
		want []string
	}{
		{pod1, "", []string{ns + "/gw1"}}, {pod1, "/" + ns, []string{ns + "/gw1"}}, {pod1, "/other", []string{}},
		{pending, "", []string{ns + "/gw1", ns + "/gw3"}}, {forged, "", []string{}},
		{node, "", []string{ns + "/gw1", ns + "/gw3"}}, {portForward, "", ids},
	} {
		if got := c.f.list(t, base+c.path); !slices.Equal(got, c.want) {
			t.Errorf("list %q from %s: %v, want %v", c.path, c.f.src, got, c.want)
		}
	}

	// Watches: of another Gateway, refused before the upgrade; of a list, only the client's.
	if _, code, err := pod1.watch(addr, "/api/v1/configs/"+ns+"/gw2"); err == nil || code != 403 {
		t.Errorf("watch of gw2 from gw1's pod: %d %v, want 403", code, err)
	}
	one, _, err := pod1.watch(addr, "/api/v1/configs/"+ns+"/gw1")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	all, _, err := pod1.watch(addr, "/api/v1/configs")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	read := func(conn *websocket.Conn) string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("watch read: %v", err)
		}
		return string(msg)
	}
	if got := read(one); got != string(configs[ns+"/gw1"]) {
		t.Errorf("watch gw1: %s", got)
	}
	if got := read(all); got != string(configs[ns+"/gw1"]) {
		t.Errorf("watch all: first %s, want gw1's only", got)
	}
	// gw2 changes, then gw1: the list watch gets gw1's change first, so it never got gw2's.
	configs[ns+"/gw2"] = cdsConfig(ns+"/gw2", "v2")
	store.Update(configs, nil)
	configs[ns+"/gw1"] = cdsConfig(ns+"/gw1", "v2")
	store.Update(configs, nil)
	if got := read(all); got != string(configs[ns+"/gw1"]) {
		t.Errorf("watch all after updates: %s, want gw1's v2", got)
	}
	if got := read(one); got != string(configs[ns+"/gw1"]) {
		t.Errorf("watch gw1 after update: %s", got)
	}

	// gw2's pod gets its IP, still Pending (the kubelet reports its containers later): served
	// from then on; and once it has finished, no more.
	setPodStatus(t, c, p2, corev1.PodPending, "127.0.0.3")
	waitGateways(t, "127.0.0.3", ns+"/gw2")
	if code, body := pending.get(t, base+"/"+ns+"/gw2"); code != 200 || body != string(configs[ns+"/gw2"]) {
		t.Errorf("GET gw2 from its pod: %d %s", code, body)
	}
	setPodStatus(t, c, p2, corev1.PodSucceeded, "127.0.0.3")
	waitGateways(t, "127.0.0.3", ns+"/gw1", ns+"/gw3")
	if code, _ := pending.get(t, base+"/"+ns+"/gw2"); code != 403 {
		t.Errorf("GET gw2 from its finished pod: %d, want 403", code)
	}
	// gw1's pod is deleted: its address is refused from then on.
	if err := c.Delete(ctx, p1, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitGateways(t, "127.0.0.2", ns+"/gw1", ns+"/gw3")
	if code, _ := pod1.get(t, base+"/"+ns+"/gw2"); code != 403 {
		t.Errorf("GET gw2 from gw1's deleted pod's address: %d, want 403", code)
	}
	// Without hostNetwork pods, an unknown address gets nothing.
	for _, name := range []string{"gw1-host", "gw3-host"} {
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	waitGateways(t, "127.0.0.2")
	if code, _ := pod1.get(t, base+"/"+ns+"/gw1"); code != 403 {
		t.Errorf("GET gw1 from its deleted pod's address: %d, want 403", code)
	}
	if got := pod1.list(t, base); len(got) != 0 {
		t.Errorf("list from gw1's deleted pod's address: %v, want none", got)
	}
}
