package cds

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	dto "github.com/prometheus/client_model/go"
)

func cfg(id, listener string) []byte {
	return []byte(`{"version":"v1","admin":{"name":"` + id + `"},"auth":{"type":"static","realm":"r","credentials":{"username":"u","password":""}},"listeners":[{"name":"` + listener + `","protocol":"TURN-UDP","port":3478}]}`)
}

// startServer serves store on a loopback port until the test ends.
func startServer(t *testing.T, store *Store) string {
	t.Helper()
	srv, err := Listen("127.0.0.1:0", NewHandler(store, nil, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return srv.Addr().String()
}

func get(t *testing.T, url string) (int, []byte) {
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
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", url, ct)
	}
	return resp.StatusCode, body
}

// TestHandlerGet drives the list, namespace, name and license endpoints as
// stunnerctl does (GET without watch).
func TestHandlerGet(t *testing.T) {
	store := NewStore()
	store.Update(map[string][]byte{"a/gw1": cfg("a/gw1", "l1"), "a/gw2": cfg("a/gw2", "l2"), "b/gw": cfg("b/gw", "l3")}, nil)
	base := "http://" + startServer(t, store)

	type list struct {
		Version string            `json:"version"`
		Items   []json.RawMessage `json:"items"`
	}
	for _, c := range []struct {
		path  string
		items int
	}{{"/api/v1/configs", 3}, {"/api/v1/configs/a", 2}, {"/api/v1/configs/b", 1}, {"/api/v1/configs/none", 0}} {
		code, body := get(t, base+c.path)
		var l list
		if err := json.Unmarshal(body, &l); err != nil || code != 200 {
			t.Fatalf("GET %s: %d %s (%v)", c.path, code, body, err)
		}
		if l.Version != "v1" || len(l.Items) != c.items || l.Items == nil {
			t.Errorf("GET %s: %s, want version v1 and %d items", c.path, body, c.items)
		}
	}
	if code, body := get(t, base+"/api/v1/configs/a/gw2"); code != 200 || string(body) != string(cfg("a/gw2", "l2")) {
		t.Errorf("GET a/gw2: %d %s", code, body)
	}
	code, body := get(t, base+"/api/v1/configs/a/missing")
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || code != 404 || e.Code != 404 || !strings.Contains(e.Message, "a/missing") {
		t.Errorf("GET a/missing: %d %s", code, body)
	}
	code, body = get(t, base+"/api/v1/license")
	var lic map[string]any
	if err := json.Unmarshal(body, &lic); err != nil || code != 200 {
		t.Fatalf("GET license: %d %s", code, body)
	}
	if lic["subscriptionType"] != "free" || lic["lastUpdated"] != "N/A" || lic["lastError"] != "" {
		t.Errorf("license: %s", body)
	}
	if f, ok := lic["enabledFeatures"].([]any); !ok || len(f) != 0 {
		t.Errorf("license enabledFeatures: %s", body)
	}
	if code, _ := get(t, base+"/api/v1/configs?watch=maybe"); code != 400 {
		t.Errorf("watch=maybe: %d, want 400", code)
	}
}

// dial opens a watch as STUNner's client does: ws:// with watch=true and
// an Origin header naming the server.
func dial(t *testing.T, addr, path string) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	h.Set("Origin", "http://"+addr)
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+addr+path+"?watch=true&node=node-1", h)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func next(t *testing.T, conn *websocket.Conn) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	typ, msg, err := conn.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.TextMessage {
		t.Fatalf("message type %d, want text", typ)
	}
	return string(msg)
}

// TestHandlerWatch watches one Gateway, a namespace and everything, and
// sees the current configs, an update, and a deletion as STUNner's zero
// config; a ping is answered with a pong carrying its payload.
func TestHandlerWatch(t *testing.T) {
	store := NewStore()
	store.Update(map[string][]byte{"a/gw": cfg("a/gw", "l1"), "b/gw": cfg("b/gw", "l2")}, nil)
	addr := startServer(t, store)

	one := dial(t, addr, "/api/v1/configs/a/gw")
	ns := dial(t, addr, "/api/v1/configs/b")
	all := dial(t, addr, "/api/v1/configs")
	if got := next(t, one); got != string(cfg("a/gw", "l1")) {
		t.Errorf("one: first %s", got)
	}
	if got := next(t, ns); got != string(cfg("b/gw", "l2")) {
		t.Errorf("ns: first %s", got)
	}
	if a, b := next(t, all), next(t, all); a != string(cfg("a/gw", "l1")) || b != string(cfg("b/gw", "l2")) {
		t.Errorf("all: first %s, %s", a, b)
	}

	// An update of a/gw; b/gw unchanged sends nothing.
	store.Update(map[string][]byte{"a/gw": cfg("a/gw", "l9"), "b/gw": cfg("b/gw", "l2")}, nil)
	if got := next(t, one); got != string(cfg("a/gw", "l9")) {
		t.Errorf("one: update %s", got)
	}
	if got := next(t, all); got != string(cfg("a/gw", "l9")) {
		t.Errorf("all: update %s", got)
	}
	// b/gw deleted: its watchers get the zero config.
	store.Update(map[string][]byte{"a/gw": cfg("a/gw", "l9")}, nil)
	if got := next(t, ns); got != string(ZeroConfig("b/gw")) {
		t.Errorf("ns: delete %s", got)
	}
	if got := next(t, all); got != string(ZeroConfig("b/gw")) {
		t.Errorf("all: delete %s", got)
	}
	// A watch of a Gateway not served yet gets its config when it comes.
	later := dial(t, addr, "/api/v1/configs/c/gw")
	store.Update(map[string][]byte{"a/gw": cfg("a/gw", "l9"), "c/gw": cfg("c/gw", "l4")}, nil)
	if got := next(t, later); got != string(cfg("c/gw", "l4")) {
		t.Errorf("later: %s", got)
	}
}

// TestHandlerKeepalive: STUNner's client pings with "keepalive" and needs
// the pong within 8 s, or it reconnects.
func TestHandlerKeepalive(t *testing.T) {
	addr := startServer(t, NewStore())
	conn := dial(t, addr, "/api/v1/configs/z/none")
	pong := make(chan string, 1)
	conn.SetPongHandler(func(s string) error { pong <- s; return nil })
	if err := conn.WriteControl(websocket.PingMessage, []byte("keepalive"), time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Control frames are handled by a read; nothing else arrives.
	go func() { _, _, _ = conn.ReadMessage() }()
	select {
	case p := <-pong:
		if p != "keepalive" {
			t.Errorf("pong %q, want keepalive", p)
		}
	case <-time.After(30 * time.Second):
		t.Error("no pong")
	}
}

func TestZeroConfig(t *testing.T) {
	want := `{"version":"v1","admin":{"name":"ns/gw"},"auth":{"type":"static","realm":"stunner.l7mp.io","credentials":{"password":"dummy-password","username":"dummy-username"}}}`
	if got := string(ZeroConfig("ns/gw")); got != want {
		t.Errorf("ZeroConfig = %s, want %s", got, want)
	}
}

// TestStoreSlowWatcher: a watcher that does not read is cut off once its
// buffer is full, and the store's updates never wait for it.
func TestStoreSlowWatcher(t *testing.T) {
	store := NewStore()
	sub := store.subscribe("", "", false, nil)
	for i := range subscriptionBuffer + 1 {
		store.Update(map[string][]byte{"a/gw": cfg("a/gw", strings.Repeat("x", i+1))}, nil)
	}
	n := 0
	for range sub.ch {
		n++
	}
	if n != subscriptionBuffer {
		t.Errorf("got %d configs before the close, want %d", n, subscriptionBuffer)
	}
	store.unsubscribe(sub)
	if store.Watchers() != 0 {
		t.Errorf("%d watchers left", store.Watchers())
	}
}

// TestHandlerCredentials: the credentials go only to clients on the
// loopback, where port-forwards through the Kubernetes API arrive.
func TestHandlerCredentials(t *testing.T) {
	store := NewStore()
	public, private := cfg("a/gw", "l1"), []byte(`{"version":"v1","admin":{"name":"a/gw"},"auth":{"credentials":{"password":"secret"}}}`)
	store.Update(map[string][]byte{"a/gw": public}, map[string][]byte{"a/gw": private})
	h := NewHandler(store, nil, nil)
	for _, c := range []struct {
		remote, path string
		secret       bool
	}{
		{"127.0.0.1:40000", "/api/v1/configs/a/gw", true},
		{"[::1]:40000", "/api/v1/configs/a", true},
		{"[::ffff:127.0.0.1]:40000", "/api/v1/configs/a", true},
		// The rest of 127.0.0.0/8 is no port-forward.
		{"127.0.0.2:40000", "/api/v1/configs/a/gw", false},
		{"10.244.1.7:40000", "/api/v1/configs/a/gw", false},
		{"10.244.1.7:40000", "/api/v1/configs", false},
		{"[fd00::7]:40000", "/api/v1/configs/a/gw", false},
	} {
		r := httptest.NewRequest(http.MethodGet, c.path, nil)
		r.RemoteAddr = c.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := strings.Contains(w.Body.String(), `"secret"`); got != c.secret || w.Code != 200 {
			t.Errorf("%s from %s: %d %s; want credentials %v", c.path, c.remote, w.Code, w.Body, c.secret)
		}
	}
	// A watch from the loopback gets them too.
	addr := startServer(t, store)
	if got := next(t, dial(t, addr, "/api/v1/configs/a/gw")); got != string(private) {
		t.Errorf("watch from the loopback: %s", got)
	}
}

// TestNewServerBindsOnStart: a NewServer listens only once started (the
// elected replica), and a taken port is Start's error.
func TestNewServerBindsOnStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := NewServer(addr, NewHandler(NewStore(), nil, nil), nil)
	if srv.Addr() != nil {
		t.Error("bound before Start")
	}
	if err := srv.Start(context.Background()); err == nil {
		t.Error("Start on a taken port succeeded")
	}
	ln.Close()
	srv = NewServer(addr, NewHandler(NewStore(), nil, nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	var code int
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/api/v1/license"); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 200 {
		t.Errorf("license after Start: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// clientTable is Clients from a fixed table of addresses to Gateways.
type clientTable map[netip.Addr][]string

func (c clientTable) Gateways(_ context.Context, ip netip.Addr) ([]string, error) { return c[ip], nil }

// TestHandlerRefusals: a client other than a port-forward is served only
// its own Gateways; each refusal is counted by request.
func TestHandlerRefusals(t *testing.T) {
	store := NewStore()
	store.Update(map[string][]byte{"a/gw1": cfg("a/gw1", "l1"), "a/gw2": cfg("a/gw2", "l2")}, nil)
	h := NewHandler(store, clientTable{netip.MustParseAddr("10.244.1.7"): {"a/gw1"}}, nil)
	before := map[string]float64{}
	for _, req := range []string{"get", "list", "watch"} {
		before[req] = refused(t, req)
	}
	for _, c := range []struct {
		remote, path string
		code         int
		body         string
	}{
		{"10.244.1.7:40000", "/api/v1/configs/a/gw1", 200, string(cfg("a/gw1", "l1"))},
		{"10.244.1.7:40000", "/api/v1/configs/a/gw2", 403, `"code":403`},
		{"10.244.1.7:40000", "/api/v1/configs/a/gw2?watch=true", 403, `"code":403`},
		{"10.244.1.7:40000", "/api/v1/configs/a", 200, `"items":[` + string(cfg("a/gw1", "l1")) + `]`},
		{"10.244.1.8:40000", "/api/v1/configs/a/gw1", 403, "10.244.1.8"},
		{"127.0.0.1:40000", "/api/v1/configs/a/gw2", 200, string(cfg("a/gw2", "l2"))},
	} {
		r := httptest.NewRequest(http.MethodGet, c.path, nil)
		r.RemoteAddr = c.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s from %s: %d %s; want %d with %s", c.path, c.remote, w.Code, w.Body, c.code, c.body)
		}
	}
	for req, want := range map[string]float64{"get": 2, "list": 1, "watch": 1} {
		if got := refused(t, req) - before[req]; got != want {
			t.Errorf("refused{request=%q} grew by %v, want %v", req, got, want)
		}
	}
}

func refused(t *testing.T, req string) float64 {
	t.Helper()
	var m dto.Metric
	if err := metricRefused.WithLabelValues(req).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
