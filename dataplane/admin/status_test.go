package admin

import (
	"encoding/json"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

func TestNewStatus(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{
			Version: config.Version,
			Admin:   config.Admin{Name: "ns/gw", LogLevel: "all:INFO", HealthAddress: "10.0.0.1:8086", MetricsAddress: "10.0.0.1:8080"},
			Auth:    config.Auth{Type: "static", Realm: "r.example", Username: "user1", Password: "hunter2-secret"},
			Listeners: []config.Listener{
				{Name: "udp", Protocol: "TURN-UDP", Address: "0.0.0.0", Port: 3478, PublicAddress: "198.51.100.1", PublicPort: 3478, Routes: []string{"media"}},
				{Name: "tls", Protocol: "TURN-TLS", Address: "0.0.0.0", Port: 443, Cert: "/certs/tls.crt", Key: "/certs/tls.key"},
			},
			Clusters: []config.Cluster{{Name: "media", Type: "strict_dns", Endpoints: []string{"media.ns.svc"}}, {Name: "static", Endpoints: []string{"10.1.0.0/16"}}},
			Limits:   config.Limits{AllocationsPerUser: 5},
		}
	}
	udpStats := DirStats{Rx: DirStat{Pkts: 3, Bytes: 300}, Tx: DirStat{Pkts: 2, Bytes: 200}}
	for _, tc := range []struct {
		name   string
		mod    func(*config.Config)
		in     StatusInput
		status string
		auth   StatusAuth
		check  func(t *testing.T, st Status)
	}{
		{name: "ready static", in: StatusInput{Ready: true, Allocations: 4, Listeners: map[string]DirStats{"udp": udpStats}},
			status: StatusReady, auth: StatusAuth{Type: "static", Realm: "r.example", Credentials: map[string]string{"username": "<SECRET>", "password": "<SECRET>"}},
			check: func(t *testing.T, st Status) {
				want := StatusAdmin{Name: "ns/gw", LogLevel: "all:INFO", MetricsEndpoint: "http://10.0.0.1:8080/metrics", HealthCheckEndpoint: "http://10.0.0.1:8086", Quota: "5", Offload: "None[all]"}
				if st.Admin != want {
					t.Errorf("admin %+v, want %+v", st.Admin, want)
				}
				if st.AllocationCount != 4 || st.Version != "v1" {
					t.Errorf("allocationCount %d version %q", st.AllocationCount, st.Version)
				}
				wantL := []ListenerStatus{
					{Name: "udp", Protocol: "TURN-UDP", Address: "0.0.0.0", Port: 3478, PublicAddress: "198.51.100.1", PublicPort: 3478, Routes: []string{"media"}, Stats: udpStats},
					{Name: "tls", Protocol: "TURN-TLS", Address: "0.0.0.0", Port: 443},
				}
				if !reflect.DeepEqual(st.Listeners, wantL) {
					t.Errorf("listeners %+v, want %+v", st.Listeners, wantL)
				}
				wantC := []ClusterStatus{
					{Name: "media", Type: "STRICT_DNS", Protocol: "UDP", Endpoints: []string{"media.ns.svc"}},
					{Name: "static", Type: "STATIC", Protocol: "UDP", Endpoints: []string{"10.1.0.0/16"}},
				}
				if !reflect.DeepEqual(st.Clusters, wantC) {
					t.Errorf("clusters %+v, want %+v", st.Clusters, wantC)
				}
			}},
		{name: "not ready, no quota", mod: func(c *config.Config) { c.Limits.AllocationsPerUser = config.NoLimit }, in: StatusInput{}, status: StatusNotReady,
			check: func(t *testing.T, st Status) {
				if st.Admin.Quota != "0" {
					t.Errorf("quota %q for NoLimit, want 0 (STUNner's none)", st.Admin.Quota)
				}
			},
			auth: StatusAuth{Type: "static", Realm: "r.example", Credentials: map[string]string{"username": "<SECRET>", "password": "<SECRET>"}}},
		{name: "draining", in: StatusInput{Ready: true, Draining: true}, status: StatusTerminating,
			auth: StatusAuth{Type: "static", Realm: "r.example", Credentials: map[string]string{"username": "<SECRET>", "password": "<SECRET>"}}},
		{name: "ephemeral from a file", mod: func(c *config.Config) {
			c.Auth = config.Auth{Type: "ephemeral", Realm: "r.example", SharedSecretFile: "/secret/shared"}
		}, in: StatusInput{Ready: true}, status: StatusReady,
			auth: StatusAuth{Type: "ephemeral", Realm: "r.example", Credentials: map[string]string{"secret": "<SECRET>"}}},
		{name: "offload and no admin addresses", mod: func(c *config.Config) {
			c.Admin.HealthAddress, c.Admin.MetricsAddress = "", ""
			c.Listeners, c.Clusters = nil, nil
		}, in: StatusInput{Ready: true, Offload: "XDP", OffloadInterfaces: []string{"eth0", "eth1"}}, status: StatusReady,
			auth: StatusAuth{Type: "static", Realm: "r.example", Credentials: map[string]string{"username": "<SECRET>", "password": "<SECRET>"}},
			check: func(t *testing.T, st Status) {
				if st.Admin.Offload != "XDP[eth0,eth1]" || st.Admin.HealthCheckEndpoint != "" || st.Admin.MetricsEndpoint != "" {
					t.Errorf("admin %+v", st.Admin)
				}
				if st.Listeners == nil || st.Clusters == nil {
					t.Errorf("listeners %v, clusters %v: want empty, not null", st.Listeners, st.Clusters)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			if tc.mod != nil {
				tc.mod(cfg)
			}
			st := NewStatus(cfg, tc.in)
			if st.Status != tc.status {
				t.Errorf("status %q, want %q", st.Status, tc.status)
			}
			if !reflect.DeepEqual(st.Auth, tc.auth) {
				t.Errorf("auth %+v, want %+v", st.Auth, tc.auth)
			}
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{"hunter2-secret", "user1", "/secret/shared", "tls.key", "tls.crt"} {
				if strings.Contains(string(b), secret) {
					t.Errorf("JSON holds %q: %s", secret, b)
				}
			}
			if tc.check != nil {
				tc.check(t, st)
			}
		})
	}
}

// TestStatusEndpoint: /status is served on the health address as JSON
// with STUNner's keys, and only when Handlers.Status is set.
func TestStatusEndpoint(t *testing.T) {
	health := freeAddr(t)
	cfg := &config.Config{Admin: config.Admin{Name: "gw", HealthAddress: health}, Auth: config.Auth{Type: "static", Realm: "r"},
		Listeners: []config.Listener{{Name: "l", Protocol: "TURN-UDP", Address: "127.0.0.1", Port: 3478}}}
	cfg.Auth.Password = "pw"
	e, err := Start(cfg.Admin, Handlers{Ready: func() bool { return true },
		Status: func() Status { return NewStatus(cfg, StatusInput{Ready: true, Allocations: 2}) }}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	code, body := get(t, "http://"+health+StatusPath)
	if code != 200 {
		t.Fatalf("/status: %d %s", code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, k := range []string{"version", "admin", "auth", "listeners", "clusters", "allocationCount", "status"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, body)
		}
	}
	if !strings.Contains(body, `"password":"<SECRET>"`) {
		t.Errorf("auth not in %s", body)
	}
	if m["status"] != "READY" || m["allocationCount"] != 2.0 {
		t.Errorf("status %v allocationCount %v", m["status"], m["allocationCount"])
	}

	other := freeAddr(t)
	e2, err := Start(config.Admin{HealthAddress: other}, Handlers{Ready: func() bool { return true }}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if code, _ := get(t, "http://"+other+StatusPath); code != 404 {
		t.Errorf("/status without Handlers.Status: %d, want 404", code)
	}
}

func TestLoopbackTwin(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.0.0.5:8086", "127.0.0.1:8086"},
		{"[::ffff:10.0.0.5]:8086", "127.0.0.1:8086"},
		{"[2001:db8::5]:8086", "[::1]:8086"},
		{"127.0.0.1:8086", ""},
		{"127.0.0.2:8086", ""},
		{"[::1]:8086", ""},
		{"0.0.0.0:8086", ""},
		{":8086", ""},
		{"[::]:8086", ""},
		{"pod.example:8086", ""},
		{"", ""},
		{"10.0.0.5", ""},
	} {
		if got := LoopbackTwin(tc.addr); got != tc.want {
			t.Errorf("LoopbackTwin(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestHealthOnLoopbackTwin: a health address on an interface's IP (a
// pod's) is served on loopback too, where kubectl port-forward connects;
// nothing is sent to the interface's address itself.
func TestHealthOnLoopbackTwin(t *testing.T) {
	var ip net.IP
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Skip("no IPv4 address but loopback to bind a health address to")
	}
	port, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port.Addr().(*net.TCPAddr).Port
	port.Close()
	health := net.JoinHostPort(ip.String(), strconv.Itoa(p))
	cfg := &config.Config{Admin: config.Admin{HealthAddress: health}}
	e, err := Start(cfg.Admin, Handlers{Ready: func() bool { return true },
		Status: func() Status { return NewStatus(cfg, StatusInput{Ready: true}) }}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	twin := LoopbackTwin(health)
	for _, path := range []string{"/ready", StatusPath} {
		if code, body := get(t, "http://"+twin+path); code != 200 {
			t.Errorf("%s on %s: %d %s", path, twin, code, body)
		}
	}
}
