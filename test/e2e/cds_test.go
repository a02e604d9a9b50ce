package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/stun/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/cds"
	"github.com/tern-gw/tern/operator/controller"
)

// cdsManifests is a Gateway whose one route reaches the StaticService peer-a (127.0.0.2/32)
// and not peer-b (127.0.0.3/32), in a namespace of this test's own.
const cdsManifests = `apiVersion: v1
kind: Namespace
metadata: {name: e2e-cds}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: e2e-cds-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: e2e-cds-config, namespace: e2e-cds}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: e2e-cds-config, namespace: e2e-cds}
spec: {dataplane: e2e-cds-dataplane, realm: stunner.l7mp.io, authType: static, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: e2e-cds-dataplane}
spec: {image: ternd:e2e, disableHealthCheck: true, configSource: CDS}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: e2e-cds}
spec:
  gatewayClassName: e2e-cds-class
  listeners: [{name: udp, port: %d, protocol: TURN-UDP}]
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peer-a, namespace: e2e-cds}
spec: {prefixes: [127.0.0.2/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: StaticService
metadata: {name: peer-b, namespace: e2e-cds}
spec: {prefixes: [127.0.0.3/32]}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-cds}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: stunner.l7mp.io, kind: StaticService, name: peer-a}]}]
`

// cdsRouteChanged: peer-b joins peer-a.
const cdsRouteChanged = `apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: media, namespace: e2e-cds}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs:
    - {group: stunner.l7mp.io, kind: StaticService, name: peer-a}
    - {group: stunner.l7mp.io, kind: StaticService, name: peer-b}
`

// stunnerConfig is what STUNner's tools read of a served config (its v1 API's field names).
type stunnerConfig struct {
	Version string `json:"version"`
	Admin   struct {
		Name string `json:"name"`
	} `json:"admin"`
	Auth struct {
		Type        string            `json:"type"`
		Realm       string            `json:"realm"`
		Credentials map[string]string `json:"credentials"`
	} `json:"auth"`
	Listeners []struct {
		Name     string `json:"name"`
		Protocol string `json:"protocol"`
		Address  string `json:"address"`
		Port     int    `json:"port"`
	} `json:"listeners"`
	Clusters []struct {
		Name      string   `json:"name"`
		Type      string   `json:"type"`
		Endpoints []string `json:"endpoints"`
	} `json:"clusters"`
}

// startOperatorCDS runs the operator with its config discovery service on addr (retrying
// the bind while an earlier operator's socket is closing) and returns what stops both.
func startOperatorCDS(t *testing.T, credentialsDir, addr string) (stop func()) {
	t.Helper()
	store := cds.NewStore()
	var srv *cds.Server
	testenv.Eventually(t, 30*time.Second, func() error {
		var err error
		srv, err = cds.Listen(addr, cds.NewHandler(store, nil, nil), nil)
		return err
	})
	return startOperatorWith(t, controller.Options{CredentialsDir: credentialsDir, Configs: store},
		func(mgr manager.Manager) error { return mgr.Add(srv) })
}

// cdsGet does what `stunnerctl config` does without -w: a GET of the API, decoded.
func cdsGet(base, path string, v any) (int, error) {
	resp, err := http.Get(base + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return resp.StatusCode, json.Unmarshal(body, v)
}

// cdsWatch opens a watch as STUNner's client does (`stunnerctl config -w`, stunnerd): a
// WebSocket to the endpoint with watch=true and an Origin naming the server.
func cdsWatch(t *testing.T, addr, path string) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	h.Set("Origin", "http://"+addr)
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+addr+path+"?watch=true", h)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// nextConfig reads configs from a watch until one satisfies ok.
func nextConfig(t *testing.T, conn *websocket.Conn, what string, ok func(stunnerConfig) bool) stunnerConfig {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_ = conn.SetReadDeadline(deadline)
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("watch: waiting for %s: %v", what, err)
		}
		var c stunnerConfig
		if err := json.Unmarshal(msg, &c); err != nil {
			t.Fatalf("watch: %s is not a STUNner config: %v", msg, err)
		}
		if ok(c) {
			return c
		}
	}
}

func hasEndpoint(c stunnerConfig, ep string) bool {
	for _, cl := range c.Clusters {
		for _, e := range cl.Endpoints {
			if strings.TrimSuffix(e, "/32") == ep {
				return true
			}
		}
	}
	return false
}

// TestCDS runs tern-operator's config discovery service on a real kube-apiserver and drives
// it as STUNner's tools do: stunnerctl's list, namespace and name GETs, turncat's lookup of a
// Gateway's listener (k8s://e2e-cds/gw:udp), and a watch that sees the route change and the
// Gateway's deletion. A ternd started as the rendered pod of a Dataplane with configSource: CDS
// starts it (no ServiceAccount token, no ConfigMap; its -c naming the service, the Gateway from
// STUNNER_NAMESPACE/STUNNER_NAME, as STUNner's stunnerd) follows the route change through
// the service, keeps relaying on its last config while the operator is stopped, reconnects to
// the operator that comes back, and keeps its config when the Gateway is deleted.
func TestCDS(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn is not configured by the operator")
	}
	c, err := client.New(apiServer.Config(t), client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	base := "http://" + addr
	creds := &secretVolume{dir: t.TempDir()}
	stopOperator := startOperatorCDS(t, creds.dir, addr)

	port := listenerPort(t)
	testenv.Apply(t, c, fmt.Appendf(nil, cdsManifests, port))
	// The credentials Secret, as the kubelet mounts it: the one thing ternd reads besides CDS.
	var secret corev1.Secret
	testenv.Eventually(t, 30*time.Second, func() error {
		return c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-cds", Name: "gw-tern-auth"}, &secret)
	})
	creds.sync(t, &secret)

	// stunnerctl config: the list, the namespace and the Gateway.
	var one stunnerConfig
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := cdsGet(base, "/api/v1/configs/e2e-cds/gw", &one)
		return err
	})
	if one.Version != "v1" || one.Admin.Name != "e2e-cds/gw" || one.Auth.Type != "static" || len(one.Listeners) != 1 {
		t.Fatalf("GET e2e-cds/gw: %+v", one)
	}
	// This client is on the operator's loopback, as a port-forward (stunnerctl, turncat) is:
	// it gets the credentials turncat authenticates with.
	if one.Auth.Credentials["username"] != "user" || one.Auth.Credentials["password"] != "pass" {
		t.Errorf("credentials %v; want user/pass through the loopback", one.Auth.Credentials)
	}
	for _, path := range []string{"/api/v1/configs", "/api/v1/configs/e2e-cds"} {
		var list struct {
			Version string          `json:"version"`
			Items   []stunnerConfig `json:"items"`
		}
		if _, err := cdsGet(base, path, &list); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, it := range list.Items {
			found = found || it.Admin.Name == "e2e-cds/gw"
		}
		if list.Version != "v1" || !found {
			t.Errorf("GET %s: %+v lacks e2e-cds/gw", path, list)
		}
	}
	if code, _ := cdsGet(base, "/api/v1/configs/e2e-cds/nope", &one); code != http.StatusNotFound {
		t.Errorf("GET e2e-cds/nope: %d, want 404", code)
	}
	// turncat k8s://e2e-cds/gw:udp: the Gateway's config names the listener
	// <namespace>/<gateway>/<listener>, with its protocol and port.
	l := one.Listeners[0]
	if l.Name != "e2e-cds/gw/udp" || l.Protocol != "TURN-UDP" || l.Port != port {
		t.Errorf("listener %+v, want e2e-cds/gw/udp TURN-UDP on %d", l, port)
	}
	var lic map[string]any
	if _, err := cdsGet(base, "/api/v1/license", &lic); err != nil || lic["subscriptionType"] != "free" {
		t.Errorf("license: %v, %v", lic, err)
	}

	// stunnerctl config -w, and ternd as stunnerd would run in the pod.
	watch := cdsWatch(t, addr, "/api/v1/configs/e2e-cds/gw")
	nextConfig(t, watch, "the current config", func(c stunnerConfig) bool { return c.Admin.Name == "e2e-cds/gw" && hasEndpoint(c, "127.0.0.2") })

	// The rendered pod (configSource: CDS): no ServiceAccount token, no ConfigMap, -c naming
	// the service. ternd runs with its arguments and its STUNNER_* variables, the service's
	// address put in for this test's.
	var dep appsv1.Deployment
	testenv.Eventually(t, 30*time.Second, func() error {
		return c.Get(context.Background(), client.ObjectKey{Namespace: "e2e-cds", Name: "gw"}, &dep)
	})
	pod := dep.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false", pod.AutomountServiceAccountToken)
	}
	args := pod.Containers[0].Args
	if len(args) < 2 || args[len(args)-2] != "-c" || !strings.HasPrefix(args[len(args)-1], "http://stunner-config-discovery.") {
		t.Fatalf("rendered args %q, want -c http://stunner-config-discovery...", args)
	}
	args = append(append([]string(nil), args[:len(args)-1]...), base, "-l", "info")
	env := []string{"POD_IP=127.0.0.1"}
	for _, e := range pod.Containers[0].Env {
		if strings.HasPrefix(e.Name, "STUNNER_NAME") && e.Value != "" {
			env = append(env, e.Name+"="+e.Value)
		}
		if e.Name == "TERN_CONFIGMAP" {
			t.Errorf("rendered TERN_CONFIGMAP in CDS mode")
		}
	}
	s := &server{addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	cmd := exec.Command(terndBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	s.start(t, cmd)
	s.waitBinding(t)

	peerA := startEchoPeer(t, "127.0.0.2:0")
	peerB := startEchoPeer(t, "127.0.0.3:0")
	ca := newPionClient(t, s, testUser, testPassword)
	relayA := ca.allocate(t)
	roundTrips(t, relayA, peerA.addr, 3)
	cb := newPionClient(t, s, testUser, testPassword)
	relayB := cb.allocate(t)
	if m := cb.transact(t, stun.MethodCreatePermission, peerAddress(peerB.addr)); errorCode(m) != 403 {
		t.Fatalf("CreatePermission to peer B before the change: error %d, want 403", errorCode(m))
	}

	// The route change reaches the watcher and ternd through the service.
	testenv.Apply(t, c, []byte(cdsRouteChanged))
	nextConfig(t, watch, "the route change", func(c stunnerConfig) bool { return hasEndpoint(c, "127.0.0.3") })
	testenv.Eventually(t, 30*time.Second, func() error {
		if m := cb.transact(t, stun.MethodCreatePermission, peerAddress(peerB.addr)); errorCode(m) != 0 {
			return fmt.Errorf("peer B still refused (%d) after the route change", errorCode(m))
		}
		return nil
	})
	roundTrips(t, relayB, peerB.addr, 3)

	// The operator stops: ternd keeps relaying, and allocating, on its last config.
	stopOperator()
	testenv.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(s.out.String(), "connection lost; keeping the running config") {
			return fmt.Errorf("ternd has not noticed the operator is gone")
		}
		return nil
	})
	roundTrips(t, relayA, peerA.addr, 3)
	roundTrips(t, relayB, peerB.addr, 3)
	cc := newPionClient(t, s, testUser, testPassword)
	relayC := cc.allocate(t)
	if m := cc.transact(t, stun.MethodCreatePermission, peerAddress(peerB.addr)); errorCode(m) != 0 {
		t.Fatalf("CreatePermission to peer B with the operator away: error %d", errorCode(m))
	}
	roundTrips(t, relayC, peerB.addr, 3)

	// The operator comes back on the same address: ternd reconnects.
	connected := strings.Count(s.out.String(), "config discovery: connected")
	startOperatorCDS(t, creds.dir, addr)
	testenv.Eventually(t, 60*time.Second, func() error {
		if n := strings.Count(s.out.String(), "config discovery: connected"); n <= connected {
			return fmt.Errorf("ternd has not reconnected (%d connects)", n)
		}
		return nil
	})
	watch = cdsWatch(t, addr, "/api/v1/configs/e2e-cds/gw")
	nextConfig(t, watch, "the config from the new operator", func(c stunnerConfig) bool { return hasEndpoint(c, "127.0.0.3") })

	// The Gateway is deleted: the watch gets STUNner's zero config, the GET a 404, and
	// ternd keeps relaying on its last config.
	gw := &gwapiv1.Gateway{}
	gw.Namespace, gw.Name = "e2e-cds", "gw"
	if err := c.Delete(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	nextConfig(t, watch, "the zero config", func(c stunnerConfig) bool {
		return c.Admin.Name == "e2e-cds/gw" && len(c.Listeners) == 0 && c.Auth.Credentials["username"] == "dummy-username"
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if code, _ := cdsGet(base, "/api/v1/configs/e2e-cds/gw", &one); code != http.StatusNotFound {
			return fmt.Errorf("GET after the delete: %d, want 404", code)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(s.out.String(), "reports the Gateway deleted; running config kept") {
			return fmt.Errorf("ternd has not seen the deletion")
		}
		return nil
	})
	roundTrips(t, relayA, peerA.addr, 3)
	roundTrips(t, relayB, peerB.addr, 3)
	ca.assertQuiet(t)
}
