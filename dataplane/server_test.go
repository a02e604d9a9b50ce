package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// handedOut holds every port freePort has returned in this test process,
// so that two listeners of one config never get the same number: the
// kernel may hand a port it just took back to the very next bind(0).
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freePort returns a loopback port that was free for network ("udp" or
// "tcp") a moment ago and that no earlier call in this process returned.
// Another process may still take it before the server binds it: startWith
// picks new ports and tries again when that happens.
func freePort(t *testing.T, network string) int {
	t.Helper()
	for {
		p := kernelPort(t, network)
		handedOut.Lock()
		if handedOut.ports == nil {
			handedOut.ports = map[int]bool{}
		}
		fresh := !handedOut.ports[p]
		handedOut.ports[p] = true
		handedOut.Unlock()
		if fresh {
			return p
		}
	}
}

func kernelPort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	default:
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
}

// repickPorts gives every listener and admin endpoint of cfg that has a
// port a new one from freePort, keeping listeners that shared a port
// (TLS and DTLS on one number) together. It is how startWith recovers when
// a port it was handed was taken by another process before the bind.
func repickPorts(t *testing.T, cfg *config.Config) {
	t.Helper()
	moved := map[int]int{}
	next := func(old int, network string) int {
		if old == 0 {
			return 0
		}
		if p, ok := moved[old]; ok {
			return p
		}
		moved[old] = freePort(t, network)
		return moved[old]
	}
	for i := range cfg.Listeners {
		network := "tcp"
		if cfg.Listeners[i].Protocol == protocol.TURNUDP {
			network = "udp"
		}
		cfg.Listeners[i].Port = next(cfg.Listeners[i].Port, network)
	}
	for _, a := range []*string{&cfg.Admin.MetricsAddress, &cfg.Admin.HealthAddress} {
		host, port, err := net.SplitHostPort(*a)
		if err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		*a = net.JoinHostPort(host, strconv.Itoa(next(p, "tcp")))
	}
}

// testConfig is a loopback config with one TURN-UDP listener "udp" and
// relay ports [min, max].
func testConfig(t *testing.T, min, max int) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
version: v1
admin: {name: test, metricsAddress: "127.0.0.1:%d", healthAddress: "127.0.0.1:%d"}
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: %d, routes: [local]}
clusters:
  - {name: local, endpoints: ["127.0.0.1/32"]}
relay: {address: 127.0.0.1, minPort: %d, maxPort: %d}
`, freePort(t, "tcp"), freePort(t, "tcp"), freePort(t, "udp"), min, max)
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startWith runs a dataplane from cfg until the test ends.
func startWith(t *testing.T, cfg *config.Config) *Server {
	t.Helper()
	return startOpts(t, cfg, Options{UDPThreads: 2, RelayThreads: 2, GSO: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// startOpts runs a dataplane from cfg with opts until the test ends. When
// a port of cfg was taken between freePort and the bind (by a parallel
// test package, or an outgoing connection's ephemeral port), it moves
// cfg's ports and tries again, up to five times; cfg is changed in place,
// so callers read the ports from it afterwards.
func startOpts(t *testing.T, cfg *config.Config, opts Options) *Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		srv, err := New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Start()
		if err == nil {
			t.Cleanup(srv.Close)
			return srv
		}
		srv.Close()
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; moving to new ports", attempt, err)
		repickPorts(t, cfg)
	}
}

// startServer runs a dataplane on loopback with relay ports [min, max].
func startServer(t *testing.T, min, max int) (*Server, *config.Config) {
	t.Helper()
	cfg := testConfig(t, min, max)
	return startWith(t, cfg), cfg
}

func listenAddr(cfg *config.Config) string { return addrOf(cfg.Listeners[0]) }

func addrOf(l config.Listener) string { return fmt.Sprintf("%s:%d", l.Address, l.Port) }

// pionClient returns a started pion/turn client for cfg's listener.
func pionClient(t *testing.T, cfg *config.Config, user, pass string) *turn.Client {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: listenAddr(cfg), TURNServerAddr: listenAddr(cfg),
		Username: user, Password: pass, Realm: cfg.Auth.Realm, Conn: conn,
		RTO: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); conn.Close() })
	return c
}

func scrape(t *testing.T, cfg *config.Config) string {
	t.Helper()
	resp, err := http.Get("http://" + cfg.Admin.MetricsAddress + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func metric(t *testing.T, cfg *config.Config, name string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, cfg), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	t.Fatalf("metric %s not exposed", name)
	return ""
}

func TestRelayPortsExhausted(t *testing.T) {
	_, cfg := startServer(t, 29990, 29990)
	first := pionClient(t, cfg, "user", "pass")
	relay, err := first.Allocate()
	if err != nil {
		t.Fatalf("first allocation: %v", err)
	}
	defer relay.Close()
	if got := relay.LocalAddr().(*net.UDPAddr).Port; got != 29990 {
		t.Errorf("relay port %d, want 29990", got)
	}
	second := pionClient(t, cfg, "user", "pass")
	if _, err := second.Allocate(); err == nil || !strings.Contains(err.Error(), "508") {
		t.Fatalf("allocation beyond the port range: %v, want 508", err)
	}
	if got := metric(t, cfg, "stunner_allocations_active"); got != "1" {
		t.Errorf("stunner_allocations_active = %s, want 1", got)
	}
}

func TestMalformedPacketsAreCounted(t *testing.T) {
	_, cfg := startServer(t, 29980, 29989)
	c, err := net.Dial("udp4", listenAddr(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, pkt := range [][]byte{{0xFF, 0xFF}, {0x40}, []byte("GET / HTTP/1.1\r\n\r\n")} {
		if _, err := c.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	// A Binding afterwards still gets answered: the worker survived.
	cl := pionClient(t, cfg, "user", "pass")
	if _, err := cl.SendBindingRequest(); err != nil {
		t.Fatalf("binding after garbage: %v", err)
	}
	// The garbage and the Binding may land on different SO_REUSEPORT sockets,
	// so the answer does not prove the garbage's worker has counted yet.
	testenv.Eventually(t, 2*time.Second, func() error {
		if got := metric(t, cfg, `tern_dropped_packets_total{reason="malformed"}`); got != "3" {
			return fmt.Errorf("malformed drops = %s, want 3", got)
		}
		return nil
	})
}

func TestHealth(t *testing.T) {
	srv, cfg := startServer(t, 29970, 29979)
	get := func(path string) int {
		resp, err := http.Get("http://" + cfg.Admin.HealthAddress + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/live") != 200 || get("/ready") != 200 {
		t.Fatal("a started server is not live and ready")
	}
	srv.ready.Store(false)
	if get("/ready") != http.StatusServiceUnavailable {
		t.Fatal("/ready is 200 while not ready")
	}
}
