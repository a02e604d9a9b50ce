package authservice

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/controller"
)

// The API server gets the CRDs the operator is deployed with.
var env = testenv.New(testenv.Options{CRDPaths: testenv.MustDeployCRDPaths()})

func TestMain(m *testing.M) {
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

const (
	testSecret = "auth-test-shared-secret"
	staticPass = "auth-test-static-pass"
)

// handlerManifests: namespace auth-a has ephemeral auth (shared secret in an authRef Secret,
// authLifetime 7200) with a Gateway of four TURN listeners and one unprogrammed, a NodePort
// Gateway on IPv6, and a Gateway with no address yet; auth-b has static auth (the password in a
// Secret key, seed 001's shape) and a Gateway of another controller; auth-c's class names a
// GatewayConfig that does not exist; auth-d's GatewayConfig is in STUN mode, with no
// credentials, and its Gateway has a TURN-UDP and a TURN-TCP listener; auth-e has ephemeral
// auth with an inline shared secret and no authLifetime (so a day is the cap).
var handlerManifests = `apiVersion: v1
kind: Namespace
metadata: {name: auth-e}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-eph-default}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: eph, namespace: auth-e}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: eph, namespace: auth-e}
spec: {authType: ephemeral, sharedSecret: ` + testSecret + `}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: auth-e}
spec:
  gatewayClassName: auth-eph-default
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: v1
kind: Namespace
metadata: {name: auth-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: auth-d}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-stun}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: stun, namespace: auth-d}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: stun, namespace: auth-d}
spec: {stunMode: true}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: stun-gw, namespace: auth-d}
spec:
  gatewayClassName: auth-stun
  listeners:
  - {name: udp, port: 3478, protocol: TURN-UDP}
  - {name: tcp, port: 3478, protocol: TURN-TCP}
---
apiVersion: v1
kind: Namespace
metadata: {name: auth-b}
---
apiVersion: v1
kind: Namespace
metadata: {name: auth-c}
---
apiVersion: v1
kind: Secret
metadata: {name: turn-auth, namespace: auth-a}
stringData: {type: ephemeral, secret: ` + testSecret + `}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-ephemeral}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: eph, namespace: auth-a}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: eph, namespace: auth-a}
spec: {authRef: {name: turn-auth}, authLifetime: 7200}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: udp-gateway, namespace: auth-a}
spec:
  gatewayClassName: auth-ephemeral
  listeners:
  - {name: udp-listener, port: 3478, protocol: TURN-UDP}
  - {name: tcp-listener, port: 3478, protocol: TURN-TCP}
  - {name: dtls-listener, port: 443, protocol: TURN-DTLS}
  - {name: tls-listener, port: 443, protocol: TURN-TLS}
  - {name: broken, port: 3479, protocol: TURN-UDP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: nodeport-gw, namespace: auth-a}
spec:
  gatewayClassName: auth-ephemeral
  # STUNner's alias of TURN-UDP, in its published manifests.
  listeners: [{name: udp, port: 3478, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: nodeport-gw, namespace: auth-a}
spec:
  type: NodePort
  selector: {app: stunner}
  ports: [{name: udp, port: 3478, protocol: UDP, nodePort: 30478}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: no-address, namespace: auth-a}
spec:
  gatewayClassName: auth-ephemeral
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: auth-b}
stringData: {password: ` + staticPass + `}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-static}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: static, namespace: auth-b}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: static, namespace: auth-b}
spec:
  authType: longterm
  userName: user-1
  password: {name: creds, namespace: auth-b, key: password}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: auth-b}
spec:
  gatewayClassName: auth-static
  # STUNner's alias of TURN-TCP.
  listeners: [{name: tcp, port: 3478, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-other}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: foreign, namespace: auth-b}
spec:
  gatewayClassName: auth-other
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: auth-broken}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: missing, namespace: auth-c}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: auth-c}
spec:
  gatewayClassName: auth-broken
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`

// setStatus writes the status the operator would: addrs, and each listener Programmed unless
// named in unprogrammed.
func setStatus(t *testing.T, c client.Client, ns, name string, addrs []gwapiv1.GatewayStatusAddress, unprogrammed ...string) {
	t.Helper()
	var gw gwapiv1.Gateway
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.Addresses = addrs
	gw.Status.Listeners = nil
	for _, l := range gw.Spec.Listeners {
		status, reason := metav1.ConditionTrue, "Programmed"
		for _, u := range unprogrammed {
			if string(l.Name) == u {
				status, reason = metav1.ConditionFalse, "Invalid"
			}
		}
		gw.Status.Listeners = append(gw.Status.Listeners, gwapiv1.ListenerStatus{
			Name: l.Name, SupportedKinds: []gwapiv1.RouteGroupKind{},
			Conditions: []metav1.Condition{{Type: "Programmed", Status: status, Reason: reason,
				LastTransitionTime: metav1.Now(), ObservedGeneration: gw.Generation}},
		})
	}
	if err := c.Status().Update(context.Background(), &gw); err != nil {
		t.Fatal(err)
	}
}

func ipAddr(v string) gwapiv1.GatewayStatusAddress {
	return gwapiv1.GatewayStatusAddress{Type: ptr(gwapiv1.IPAddressType), Value: v}
}

func ptr[T any](v T) *T { return &v }

// startService serves a Handler over real HTTP on 127.0.0.1, reading the API server through a
// controller-runtime cache as the operator does, until the test ends. It returns the base URL.
func startService(t *testing.T, opts Options) string {
	t.Helper()
	cfg := env.Config(t)
	ca, err := cache.New(cfg, cache.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", New(ca, opts), opts.Log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cacheDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { cacheDone <- ca.Start(ctx) }()
	go func() { srvDone <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		for _, ch := range []chan error{srvDone, cacheDone} {
			select {
			case err := <-ch:
				if err != nil {
					t.Errorf("stop: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("the auth service or its cache did not stop within 10s")
			}
		}
	})
	return "http://" + srv.Addr().String()
}

// get returns the status, headers and body of GET url.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// setupCluster applies handlerManifests and the Gateways' statuses (again, when another test
// did already: both are idempotent) and returns a client of the API server.
func setupCluster(t *testing.T) client.Client {
	t.Helper()
	cfg := env.Config(t)
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Apply(t, c, []byte(handlerManifests))
	setStatus(t, c, "auth-a", "udp-gateway", []gwapiv1.GatewayStatusAddress{
		{Type: ptr(gwapiv1.HostnameAddressType), Value: "lb.example.com"}, ipAddr("198.51.100.10")}, "broken")
	setStatus(t, c, "auth-a", "nodeport-gw", []gwapiv1.GatewayStatusAddress{ipAddr("2001:db8::5")})
	setStatus(t, c, "auth-a", "no-address", nil)
	setStatus(t, c, "auth-b", "gw", []gwapiv1.GatewayStatusAddress{{Type: ptr(gwapiv1.HostnameAddressType), Value: "turn.example.net"}})
	setStatus(t, c, "auth-b", "foreign", []gwapiv1.GatewayStatusAddress{ipAddr("203.0.113.1")})
	setStatus(t, c, "auth-c", "gw", []gwapiv1.GatewayStatusAddress{ipAddr("203.0.113.2")})
	setStatus(t, c, "auth-d", "stun-gw", []gwapiv1.GatewayStatusAddress{ipAddr("203.0.113.3")})

	setStatus(t, c, "auth-e", "gw", []gwapiv1.GatewayStatusAddress{ipAddr("203.0.113.4")})
	return c
}

// TestHandler asks the auth service, over HTTP, for what STUNner's API offers, against Gateways
// in a real API server read through a cache: each answer is compared whole, field names
// included, with credentials computed by Mint (itself checked against OpenSSL).
func TestHandler(t *testing.T) {
	c := setupCluster(t)
	now := time.Unix(1700000000, 0)
	var logs testenv.LockedBuffer
	base := startService(t, Options{
		Now: func() time.Time { return now },
		Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})

	eph := func(user string, ttl int64) (string, string) {
		return Mint(testSecret, user, now.Add(time.Duration(ttl)*time.Second))
	}
	udpGW := []any{"turn:198.51.100.10:3478?transport=udp", "turn:198.51.100.10:3478?transport=tcp",
		"turns:198.51.100.10:443?transport=udp", "turns:198.51.100.10:443?transport=tcp"}
	server := func(urls []any, user, pass string) map[string]any {
		return map[string]any{"urls": urls, "username": user, "credential": pass}
	}
	ice := func(policy string, servers ...map[string]any) map[string]any {
		s := make([]any, len(servers))
		for i := range servers {
			s[i] = servers[i]
		}
		return map[string]any{"iceServers": s, "iceTransportPolicy": policy}
	}
	alice7200, alice7200Pass := eph("alice", 7200)
	alice600, alice600Pass := eph("alice", 600)
	anon, anonPass := eph("", 7200)
	anonDay, anonDayPass := eph("", DefaultTTL)
	aliceDay, aliceDayPass := eph("alice", DefaultTTL)
	static := func(urls ...any) map[string]any { return server(urls, "user-1", staticPass) }
	staticOptIn := `static credentials are served only when the Gateway or its GatewayConfig has the annotation tern-gw.io/serve-static-credentials: "true"`

	// The cache fills asynchronously: wait for the whole answer. auth-b/gw has static auth
	// without the opt-in, so it is left out.
	wholeCluster := ice("all",
		server([]any{"turn:[2001:db8::5]:30478?transport=udp"}, anon, anonPass),
		server(udpGW, anon, anonPass),
		map[string]any{"urls": []any{"stun:203.0.113.3:3478"}},
		server([]any{"turn:203.0.113.4:3478?transport=udp"}, anonDay, anonDayPass))
	waitFor := func(path string, want any) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() error {
			code, _, body := get(t, base+path)
			var got any
			if code != 200 || json.Unmarshal([]byte(body), &got) != nil || !cmp.Equal(got, want) {
				return fmt.Errorf("%s: %d %s", path, code, body)
			}
			return nil
		})
	}
	waitFor("/ice?service=turn", any(wholeCluster))

	for _, tc := range []struct {
		path     string
		code     int
		want     map[string]any // the JSON answer, for 200
		wantText string         // in the text answer, for errors
	}{
		{path: "/ice?service=turn&namespace=auth-a&gateway=udp-gateway&username=alice", code: 200,
			want: ice("all", server(udpGW, alice7200, alice7200Pass))},
		{path: "/ice?namespace=auth-a&gateway=udp-gateway&username=alice&ttl=600", code: 200, // service defaults to turn on /ice
			want: ice("all", server(udpGW, alice600, alice600Pass))},
		{path: "/ice?service=turn&namespace=auth-a&gateway=udp-gateway&listener=udp-listener&username=alice&iceTransportPolicy=relay", code: 200,
			want: ice("relay", server([]any{"turn:198.51.100.10:3478?transport=udp"}, alice7200, alice7200Pass))},
		{path: "/ice?service=turn&namespace=auth-a&gateway=udp-gateway&listener=tls-listener&public-addr=turn.example.org", code: 200,
			want: ice("all", server([]any{"turns:turn.example.org:443?transport=tcp"}, anon, anonPass))},
		// ttl: capped by the GatewayConfig's authLifetime (7200 in auth-a), else a day (auth-e).
		{path: "/ice?namespace=auth-a&gateway=udp-gateway&username=alice&ttl=315360000", code: 200,
			want: ice("all", server(udpGW, alice7200, alice7200Pass))},
		{path: "/ice?namespace=auth-a&gateway=udp-gateway&username=alice&ttl=99999999999999999999", code: 200,
			want: ice("all", server(udpGW, alice7200, alice7200Pass))},
		{path: "/?service=turn&namespace=auth-e&username=alice&ttl=315360000", code: 200,
			want: map[string]any{"username": aliceDay, "password": aliceDayPass, "ttl": float64(DefaultTTL),
				"uris": []any{"turn:203.0.113.4:3478?transport=udp"}}},
		{path: "/?service=turn&namespace=auth-e&username=alice&ttl=600", code: 200,
			want: map[string]any{"username": alice600, "password": alice600Pass, "ttl": 600.0,
				"uris": []any{"turn:203.0.113.4:3478?transport=udp"}}},
		{path: "/?service=turn&namespace=auth-e&username=alice", code: 200,
			want: map[string]any{"username": aliceDay, "password": aliceDayPass, "ttl": float64(DefaultTTL),
				"uris": []any{"turn:203.0.113.4:3478?transport=udp"}}},
		// Static credentials without the opt-in: 403 with the fix.
		{path: "/ice?service=turn&namespace=auth-b&username=alice&ttl=600", code: 403, wantText: staticOptIn},
		{path: "/?service=turn&namespace=auth-b&gateway=gw", code: 403, wantText: "Gateway auth-b/gw: " + staticOptIn},
		// The TURN REST API draft's answer: the first Gateway's credential.
		{path: "/?service=turn&namespace=auth-a&gateway=udp-gateway&username=alice&ttl=600", code: 200,
			want: map[string]any{"username": alice600, "password": alice600Pass, "ttl": 600.0, "uris": udpGW}},
		{path: "/?service=turn&namespace=auth-a&username=alice", code: 200,
			want: map[string]any{"username": alice7200, "password": alice7200Pass, "ttl": 7200.0,
				"uris": []any{"turn:[2001:db8::5]:30478?transport=udp"}}},

		// STUN mode: the TURN-UDP listener as a stun: URI, no credentials.
		{path: "/ice?service=turn&namespace=auth-d&gateway=stun-gw&username=alice", code: 200,
			want: ice("all", map[string]any{"urls": []any{"stun:203.0.113.3:3478"}})},
		{path: "/ice?service=turn&namespace=auth-d&gateway=stun-gw&listener=tcp", code: 404,
			wantText: "STUN mode, and no TURN-UDP listener"},

		{path: "/?username=alice", code: 400, wantText: `service: required, want "turn"`},
		{path: "/ice?service=stun", code: 400, wantText: `service: want "turn", got "stun"`},
		{path: "/?service=turn&ttl=soon", code: 400, wantText: `ttl: want a whole number of seconds`},
		{path: "/ice?service=turn&gateway=udp-gateway", code: 400, wantText: "gateway: needs namespace"},
		{path: "/ice?iceTransportPolicy=none", code: 400, wantText: `iceTransportPolicy: want "all", "public" or "relay"`},

		{path: "/ice?service=turn&namespace=nowhere", code: 404, wantText: "no Gateway of a GatewayClass with controllerName stunner.l7mp.io/gateway-operator in namespace nowhere"},
		{path: "/ice?service=turn&namespace=auth-a&gateway=nope", code: 404, wantText: "Gateway auth-a/nope not found"},
		{path: "/?service=turn&namespace=auth-a&gateway=udp-gateway&listener=nope", code: 404, wantText: `Gateway auth-a/udp-gateway: no listener "nope"`},
		{path: "/ice?service=turn&namespace=auth-a&gateway=udp-gateway&listener=broken", code: 404, wantText: "no programmed TURN listener (not programmed: broken)"},
		{path: "/ice?service=turn&namespace=auth-a&gateway=no-address", code: 404, wantText: "Gateway auth-a/no-address: no public address yet"},
		{path: "/ice?service=turn&namespace=auth-b&gateway=foreign", code: 404, wantText: `Gateway auth-b/foreign is of GatewayClass "auth-other"`},

		{path: "/ice?service=turn&namespace=auth-c&gateway=gw", code: 500, wantText: "Gateway auth-c/gw: GatewayClass.gateway.networking.k8s.io auth-broken: spec.parametersRef: GatewayConfig auth-c/missing not found"},
		{path: "/ice?service=turn&namespace=auth-c", code: 500, wantText: "GatewayConfig auth-c/missing not found"},
		{path: "/elsewhere", code: 404, wantText: "404 page not found"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, hdr, body := get(t, base+tc.path)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			if tc.code != 200 {
				if !strings.Contains(body, tc.wantText) || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
					t.Errorf("body %q (%s), want text containing %q", body, hdr.Get("Content-Type"), tc.wantText)
				}
				return
			}
			if ct, cc := hdr.Get("Content-Type"), hdr.Get("Cache-Control"); ct != "application/json; charset=UTF-8" || cc != "no-store" {
				t.Errorf("Content-Type %q, Cache-Control %q", ct, cc)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("answer (-want +got):\n%s", d)
			}
		})
	}

	// The opt-in, on the Gateway, then on the GatewayConfig instead.
	setAnnotation := func(obj client.Object, value string) {
		t.Helper()
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		orig := obj.DeepCopyObject().(client.Object)
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		if value == "" {
			delete(ann, AnnotationServeStatic)
		} else {
			ann[AnnotationServeStatic] = value
		}
		obj.SetAnnotations(ann)
		if err := c.Patch(context.Background(), obj, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	staticGW := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "auth-b", Name: "gw"}}
	staticGC := &stnrv1.GatewayConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "auth-b", Name: "static"}}
	setAnnotation(staticGW, "true")
	waitFor("/ice?service=turn&namespace=auth-b&username=alice&ttl=600",
		any(ice("all", static("turn:turn.example.net:3478?transport=tcp"))))
	setAnnotation(staticGW, "")
	setAnnotation(staticGC, "True")
	waitFor("/?service=turn&namespace=auth-b&ttl=600", any(map[string]any{"username": "user-1", "password": staticPass,
		"ttl": 600.0, "uris": []any{"turn:turn.example.net:3478?transport=tcp"}}))
	setAnnotation(staticGC, "")
	testenv.Eventually(t, 30*time.Second, func() error {
		if code, _, body := get(t, base+"/?service=turn&namespace=auth-b"); code != 403 {
			return fmt.Errorf("after the opt-in was removed: %d %s", code, body)
		}
		return nil
	})

	resp, err := http.Post(base+"/ice?service=turn", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ice: %d, want 405", resp.StatusCode)
	}

	// The log says what was asked and why it was refused, and never a credential.
	out := logs.String()
	for _, secret := range []string{testSecret, staticPass, alice7200Pass, alice600Pass, anonPass, "alice"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{`"msg":"auth request answered"`, `"msg":"auth request refused"`, `"status":404`,
		`"msg":"Gateway left out of the answer"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
}

// TestServerStop checks that Start returns nil once its context ends and the port is closed.
func TestServerStop(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.NeedLeaderElection() {
		t.Error("NeedLeaderElection: every replica must serve")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	if code, _, _ := get(t, "http://"+srv.Addr().String()+"/ice"); code != 404 {
		t.Errorf("status %d, want 404 from the handler", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s of cancel")
	}
	if _, err := http.Get("http://" + srv.Addr().String() + "/ice"); err == nil {
		t.Error("the port still answers after Start returned")
	}
}
