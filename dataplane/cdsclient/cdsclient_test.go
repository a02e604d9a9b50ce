package cdsclient

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tern-gw/tern/operator/cds"
)

func TestWatchURL(t *testing.T) {
	for _, c := range []struct{ origin, node, want string }{
		{"http://stunner-config-discovery.stunner-system.svc:13478", "", "ws://stunner-config-discovery.stunner-system.svc:13478/api/v1/configs/ns/gw?watch=true"},
		{"ws://10.0.0.1:13478/ignored?x=1", "node-1", "ws://10.0.0.1:13478/api/v1/configs/ns/gw?node=node-1&watch=true"},
		{"https://cds:13478", "", "wss://cds:13478/api/v1/configs/ns/gw?watch=true"},
		{"10.0.0.1:13478", "", "ws://10.0.0.1:13478/api/v1/configs/ns/gw?watch=true"},
		{"[2001:db8::1]:13478", "", "ws://[2001:db8::1]:13478/api/v1/configs/ns/gw?watch=true"},
	} {
		got, err := WatchURL(c.origin, "ns", "gw", c.node)
		if err != nil || got != c.want {
			t.Errorf("WatchURL(%q) = %q, %v; want %q", c.origin, got, err, c.want)
		}
	}
	for _, origin := range []string{"ftp://x:1", "http://", "http://a b"} {
		if got, err := WatchURL(origin, "ns", "gw", ""); err == nil {
			t.Errorf("WatchURL(%q) = %q, want an error", origin, got)
		}
	}
	if _, err := WatchURL("http://x:1", "", "gw", ""); err == nil {
		t.Error("no namespace: want an error")
	}
}

// serve runs tern-operator's config discovery service from store on ln
// until the returned stop is called.
func serve(t *testing.T, addr string, store *cds.Store) (stop func()) {
	t.Helper()
	var srv *cds.Server
	var err error
	// The port of an earlier server may still be closing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		srv, err = cds.Listen(addr, cds.NewHandler(store, nil, nil), nil)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}
}

func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(60 * time.Second):
		t.Fatal("no config within 60 s")
		return ""
	}
}

// TestWatchReconnects watches a Gateway on tern-operator's real config
// discovery service: the current config, an update, the deletion (STUNner's
// zero config), and, after the server stops and a new one starts on the same
// address, the config again.
func TestWatchReconnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	store := cds.NewStore()
	store.Update(map[string][]byte{"ns/gw": []byte(`{"v":1}`), "ns/other": []byte(`{"o":1}`)}, nil)
	stop := serve(t, addr, store)

	u, err := WatchURL("http://"+addr, "ns", "gw", "")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, u, func(b []byte) { got <- string(b) }, nil) }()

	if s := recv(t, got); s != `{"v":1}` {
		t.Errorf("first config %s", s)
	}
	store.Update(map[string][]byte{"ns/gw": []byte(`{"v":2}`), "ns/other": []byte(`{"o":2}`)}, nil)
	if s := recv(t, got); s != `{"v":2}` {
		t.Errorf("update %s", s)
	}
	store.Update(map[string][]byte{"ns/other": []byte(`{"o":2}`)}, nil)
	if s := recv(t, got); s != string(cds.ZeroConfig("ns/gw")) {
		t.Errorf("delete %s", s)
	}

	// The operator goes away and comes back with the Gateway's config.
	stop()
	store2 := cds.NewStore()
	store2.Update(map[string][]byte{"ns/gw": []byte(`{"v":3}`)}, nil)
	stop = serve(t, addr, store2)
	defer stop()
	if s := recv(t, got); s != `{"v":3}` {
		t.Errorf("after the restart %s", s)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Watch returned %v, want context.Canceled", err)
	}
}
