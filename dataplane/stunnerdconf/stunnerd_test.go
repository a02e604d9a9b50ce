package stunnerdconf

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

func stunnerdEnv(k string) string {
	return map[string]string{"STUNNER_ADDR": "10.244.1.5", "POD_IP": "10.244.1.5", "NODE_IP": "192.0.2.10"}[k]
}

func TestParseStunnerdFiles(t *testing.T) {
	for _, tc := range []struct {
		file  string
		want  *config.Config
		notes []string
	}{{
		file: "udp.yaml",
		want: &config.Config{
			Version: "v1",
			Admin: config.Admin{Name: "stunner/udp-gateway", LogLevel: "all:INFO,turn:DEBUG",
				MetricsAddress: ":8080", HealthAddress: "0.0.0.0:8086"},
			Auth: config.Auth{Type: config.AuthStatic, Realm: "stunner.l7mp.io", Username: "user-1", Password: "pass-1"},
			Listeners: []config.Listener{{Name: "stunner/udp-gateway/udp-listener", Protocol: protocol.TURNUDP,
				Address: "10.244.1.5", Port: 3478, PublicAddress: "1.2.3.4", PublicPort: 3478,
				Routes: []string{"stunner/media-plane"}}},
			Clusters: []config.Cluster{{Name: "stunner/media-plane", Endpoints: []string{"10.244.0.0/16", "10.96.12.7"}}},
			Relay:    config.Relay{Address: "10.244.1.5", MinPort: config.DefaultRelayMinPort, MaxPort: config.DefaultRelayMaxPort},
			Limits: config.Limits{MaxLifetime: config.DefaultMaxLifetime, NonceLifetime: config.DefaultNonceLifetime,
				AllocationsPerUser: -1, // static credentials: every client shares the username
				AllocationsPerIP:   config.DefaultAllocationsPerIP,
				AuthFailureBurst:   config.DefaultAuthFailureBurst, AuthFailureRate: config.DefaultAuthFailureRate,
				ConnectionIdleTimeout: config.DefaultConnectionIdleTimeout, ConnectionsPerIP: config.DefaultConnectionsPerIP, MaxConnections: config.DefaultMaxConnections},
		},
	}, {
		file: "ephemeral.json",
		want: &config.Config{
			Version: "v1",
			// No healthcheck_endpoint: stunnerd's default port.
			Admin: config.Admin{Name: "default", LogLevel: "all:DEBUG", HealthAddress: ":8086"},
			Auth:  config.Auth{Type: config.AuthEphemeral, Realm: "example.com", SharedSecret: "s3cret"},
			Listeners: []config.Listener{{Name: "tcp", Protocol: protocol.TURNTCP, Address: "0.0.0.0", Port: 3479,
				Routes: []string{"peers"}}},
			Clusters: []config.Cluster{{Name: "peers", Endpoints: []string{"192.0.2.0/24"}}},
			Relay:    config.Relay{Address: "10.244.1.5", MinPort: config.DefaultRelayMinPort, MaxPort: config.DefaultRelayMaxPort},
			Limits: config.Limits{MaxLifetime: config.DefaultMaxLifetime, NonceLifetime: config.DefaultNonceLifetime,
				AllocationsPerUser: 10, AllocationsPerIP: config.DefaultAllocationsPerIP,
				AuthFailureBurst: config.DefaultAuthFailureBurst, AuthFailureRate: config.DefaultAuthFailureRate,
				ConnectionIdleTimeout: config.DefaultConnectionIdleTimeout, ConnectionsPerIP: config.DefaultConnectionsPerIP, MaxConnections: config.DefaultMaxConnections},
			Offload: config.Offload{Engine: offloadmode.None},
		},
	}} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "stunnerd", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !Detect(data) {
				t.Error("Detect = false")
			}
			got, notes, err := Parse(data, Options{Getenv: stunnerdEnv})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
			if !slices.Equal(notes, tc.notes) {
				t.Errorf("notes = %q, want %q", notes, tc.notes)
			}
		})
	}
}

// Tern's own minimal config, in YAML and JSON (as dataplane/config's tests
// have it): Detect must leave them to config.Parse.
const (
	minimalYAML = "version: v1\nauth:\n  username: user\n  password: pass\nlisteners:\n  - name: udp\n    protocol: TURN-UDP\n    port: 3478\n"
	minimalJSON = `{"version": "v1", "auth": {"username": "user", "password": "pass"}, "listeners": [{"name": "udp", "protocol": "TURN-UDP", "port": 3478}]}`
)

func TestDetectTernConfig(t *testing.T) {
	for _, s := range []string{minimalYAML, minimalJSON, "", "[", "version: v1\nadmin:\n  logLevel: info\n"} {
		if Detect([]byte(s)) {
			t.Errorf("Detect(%q) = true", s)
		}
	}
}

// TestParseStunnerdErrors checks that what Tern cannot serve is an error
// naming stunnerd's field.
func TestParseStunnerdErrors(t *testing.T) {
	const head = "version: v1\nauth:\n  credentials: {username: u, password: p}\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", head + "admin:\n  metricsAddress: ':80'\n", `unknown field "metricsAddress"`},
		{"strict dns with an address", head + "clusters:\n- name: c\n  type: STRICT_DNS\n  endpoints: [10.0.0.1/32]\n", "clusters[0]"},
		{"cluster type", head + "clusters:\n- name: c\n  type: EDS\n", `clusters[0].type: unknown cluster type "EDS"`},
		{"tcp cluster", head + "clusters:\n- name: c\n  protocol: TCP\n  endpoints: [10.0.0.1]\n", "clusters[0].protocol: only UDP"},
		{"metrics scheme", head + "admin:\n  metrics_endpoint: ':8080'\n", "admin.metrics_endpoint:"},
		{"metrics port", head + "admin:\n  metrics_endpoint: http://1.2.3.4/metrics\n", "admin.metrics_endpoint:"},
		{"tls not base64", head + "listeners:\n- name: tls\n  protocol: TURN-TLS\n  cert: /etc/cert.pem\n  key: /etc/key.pem\n", "listeners[0].cert: cert must be a base64-encoded PEM"},
		{"tls half", head + "listeners:\n- name: tls\n  protocol: TURN-TLS\n  cert: abc\n", "listeners[0].cert: cert and key must both be set"},
		{"version", "version: v1alpha1\nauth:\n  credentials: {username: u, password: p}\n", "version: must be"},
		{"no pod ip", head + "listeners:\n- name: udp\n  address: $STUNNER_ADDR\n", "POD_IP"},
		{"bad level", head + "admin:\n  loglevel: all:LOUD\n", "admin.logLevel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseStunnerdNotes(t *testing.T) {
	doc := `version: v1
admin:
  metrics_endpoint: http://:9090/stats
  healthcheck_endpoint: ""
  offload_engine: XDP
  license_config: {key: k, hmac: h}
auth:
  type: plaintext
  credentials: {username: u, password: p, extra: x}
listeners: [{name: udp}]
`
	c, notes, err := Parse([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Offload.Engine != offloadmode.XDP {
		t.Errorf("offload %+v", c.Offload)
	}
	if c.Admin.HealthAddress != "" || c.Admin.MetricsAddress != ":9090" || c.Auth.Type != config.AuthStatic {
		t.Errorf("admin %+v, auth type %q", c.Admin, c.Auth.Type)
	}
	want := []string{
		"admin.metrics_endpoint: metrics are served on /metrics, not /stats",
		`admin.offload_engine: "XDP" read as offload.engine XDP`,
		"admin.license_config ignored: Tern needs no license",
		"auth.credentials.extra ignored: only username, password and secret are used",
	}
	if !slices.Equal(notes, want) {
		t.Errorf("notes:\n%q\nwant\n%q", notes, want)
	}
}

func TestParseStunnerdTLS(t *testing.T) {
	pemCert, pemKey := "-----BEGIN CERTIFICATE-----\nx\n", "-----BEGIN PRIVATE KEY-----\ny\n"
	doc := "version: v1\nauth:\n  credentials: {username: u, password: p}\nlisteners:\n- name: tls\n  protocol: TLS\n  port: 5349\n  cert: " +
		base64.StdEncoding.EncodeToString([]byte(pemCert)) + "\n  key: " + base64.StdEncoding.EncodeToString([]byte(pemKey)) + "\n"
	var gotCert, gotKey string
	c, _, err := Parse([]byte(doc), Options{WriteTLS: func(name string, cert, key []byte) (string, string, error) {
		gotCert, gotKey = string(cert), string(key)
		return "/tls/" + name + ".crt", "/tls/" + name + ".key", nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if gotCert != pemCert || gotKey != pemKey {
		t.Errorf("WriteTLS got %q, %q", gotCert, gotKey)
	}
	if l := c.Listeners[0]; l.Protocol != protocol.TURNTLS || l.Cert != "/tls/tls.crt" || l.Key != "/tls/tls.key" {
		t.Errorf("listener %+v", l)
	}
	if _, _, err := Parse([]byte(doc), Options{}); err == nil || !strings.Contains(err.Error(), "listeners[0].cert") {
		t.Errorf("without WriteTLS: %v", err)
	}
}

func TestParseTURNURI(t *testing.T) {
	c, err := ParseTURNURI("turn://user1:passwd1@127.0.0.1:3478?transport=udp", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listeners[0]
	if c.Auth.Type != config.AuthStatic || c.Auth.Username != "user1" || c.Auth.Password != "passwd1" ||
		l.Protocol != protocol.TURNUDP || l.Address != "127.0.0.1" || l.Port != 3478 || c.Relay.Address != "127.0.0.1" {
		t.Errorf("config %+v", c)
	}
	c, err = ParseTURNURI("turn://s3cret@10.0.0.1?transport=tcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.Type != config.AuthEphemeral || c.Auth.SharedSecret != "s3cret" || c.Listeners[0].Protocol != protocol.TURNTCP || c.Listeners[0].Port != 3478 {
		t.Errorf("config %+v", c)
	}
	for _, bad := range []string{"stun://u:p@1.2.3.4", "turn://1.2.3.4:3478", "turn://u:p@1.2.3.4:x", "turn://u:p@1.2.3.4?transport=sctp", "::"} {
		if _, err := ParseTURNURI(bad, nil); err == nil {
			t.Errorf("ParseTURNURI(%q) accepted", bad)
		}
	}
}

// TestParseStunnerdStrictDNS: a STRICT_DNS cluster keeps its type and host
// names, which the dataplane resolves.
func TestParseStunnerdStrictDNS(t *testing.T) {
	doc := "version: v1\nauth:\n  credentials: {username: u, password: p}\nlisteners:\n- {name: udp, protocol: TURN-UDP, port: 3478, routes: [media]}\nclusters:\n- name: media\n  type: STRICT_DNS\n  endpoints: [media.example.svc.cluster.local]\n"
	c, _, err := Parse([]byte(doc), Options{Getenv: func(string) string { return "10.0.0.1" }})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Clusters) != 1 || !c.Clusters[0].IsStrictDNS() || c.Clusters[0].Endpoints[0] != "media.example.svc.cluster.local" {
		t.Errorf("clusters %+v", c.Clusters)
	}
}

// TestParseStunnerdUserQuota: admin.user_quota has stunnerd's meaning when
// present (0 or less: no cap) and Tern's default when absent.
func TestParseStunnerdUserQuota(t *testing.T) {
	const doc = "version: v1\nauth:\n  type: ephemeral\n  credentials: {secret: s}\nlisteners:\n- name: udp\n  address: 127.0.0.1\n  port: 3478\n"
	for _, tc := range []struct {
		name, admin string
		want        int
	}{
		{"absent", "", config.DefaultAllocationsPerUser},
		{"zero", "admin:\n  user_quota: 0\n", config.NoLimit},
		{"negative", "admin:\n  user_quota: -3\n", config.NoLimit},
		{"set", "admin:\n  user_quota: 7\n", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := Parse([]byte(doc+tc.admin), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Limits.AllocationsPerUser; got != tc.want {
				t.Errorf("limits.allocationsPerUser = %d, want %d", got, tc.want)
			}
		})
	}
}
