package config

import (
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/placeholder"
)

// testEnv is the environment of a dataplane pod, for getenv arguments.
func testEnv(k string) string {
	return map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "192.168.1.10"}[k]
}

func TestExpandPlaceholders(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		getenv  func(string) string
		want    Config
		wantErr string
	}{
		{
			name:   "relay address from the pod, public from the node",
			cfg:    Config{Relay: Relay{Address: placeholder.PodIP, PublicAddress: placeholder.NodeIP}},
			getenv: testEnv,
			want:   Config{Relay: Relay{Address: "10.244.0.7", PublicAddress: "192.168.1.10"}},
		},
		{
			name: "listener fields, and only whole values of address fields",
			cfg: Config{
				Listeners: []Listener{{Address: placeholder.NodeIP, PublicAddress: "x" + placeholder.PodIP}},
				Auth:      Auth{Password: placeholder.PodIP},
			},
			getenv: testEnv,
			want: Config{
				Listeners: []Listener{{Address: "192.168.1.10", PublicAddress: "x" + placeholder.PodIP}},
				Auth:      Auth{Password: placeholder.PodIP},
			},
		},
		{
			name:   "admin addresses: the host, an IPv6 one bracketed",
			cfg:    Config{Admin: Admin{HealthAddress: placeholder.PodIP + ":8086", MetricsAddress: placeholder.NodeIP + ":8080"}},
			getenv: func(k string) string { return map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "fd00::7"}[k] },
			want:   Config{Admin: Admin{HealthAddress: "10.244.0.7:8086", MetricsAddress: "[fd00::7]:8080"}},
		},
		{
			name:   "admin addresses without a placeholder stay",
			cfg:    Config{Admin: Admin{HealthAddress: "0.0.0.0:8086", MetricsAddress: "x" + placeholder.PodIP + ":8080"}},
			getenv: testEnv,
			want:   Config{Admin: Admin{HealthAddress: "0.0.0.0:8086", MetricsAddress: "x" + placeholder.PodIP + ":8080"}},
		},
		{
			name:    "admin address: a missing variable names the field",
			cfg:     Config{Admin: Admin{MetricsAddress: placeholder.PodIP + ":8080"}},
			getenv:  func(string) string { return "" },
			wantErr: "admin.metricsAddress: $(POD_IP) needs the environment variable POD_IP",
		},
		{
			name:    "missing variable names the field",
			cfg:     Config{Listeners: []Listener{{}, {Address: placeholder.PodIP}}},
			getenv:  func(string) string { return "" },
			wantErr: "listeners[1].address: $(POD_IP) needs the environment variable POD_IP",
		},
		{
			name:    "nil getenv sets no variable",
			cfg:     Config{Relay: Relay{PublicAddress: placeholder.NodeIP}},
			wantErr: "relay.publicAddress: $(NODE_IP) needs the environment variable NODE_IP",
		},
		{
			name: "pod IPs of both families",
			cfg:  Config{Relay: Relay{Address: placeholder.PodIPs, ExtraAddresses: []RelayAddress{{Address: "10.0.0.9"}}}},
			getenv: func(k string) string {
				return map[string]string{"POD_IPS": "10.244.0.7, fd00::7,10.244.0.7,", "POD_IP": "10.244.0.7"}[k]
			},
			want: Config{Relay: Relay{Address: "10.244.0.7", ExtraAddresses: []RelayAddress{{Address: "fd00::7"}, {Address: "10.0.0.9"}}}},
		},
		{
			name:   "pod IPs fall back to POD_IP",
			cfg:    Config{Relay: Relay{Address: placeholder.PodIPs}},
			getenv: testEnv,
			want:   Config{Relay: Relay{Address: "10.244.0.7", ExtraAddresses: []RelayAddress{}}},
		},
		{
			name:    "pod IPs missing",
			cfg:     Config{Relay: Relay{Address: placeholder.PodIPs}},
			wantErr: "relay.address: $(POD_IPS) needs the environment variable POD_IPS or POD_IP",
		},
		{
			name: "nil getenv is fine without placeholders",
			cfg:  Config{Relay: Relay{Address: "10.0.0.1"}},
			want: Config{Relay: Relay{Address: "10.0.0.1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			err := c.expandPlaceholders(tt.getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.Relay.Equal(tt.want.Relay) || c.Auth != tt.want.Auth || len(c.Listeners) != len(tt.want.Listeners) {
				t.Fatalf("got %+v, want %+v", c, tt.want)
			}
			for i := range c.Listeners {
				if c.Listeners[i].Address != tt.want.Listeners[i].Address || c.Listeners[i].PublicAddress != tt.want.Listeners[i].PublicAddress {
					t.Fatalf("listener %d: got %+v, want %+v", i, c.Listeners[i], tt.want.Listeners[i])
				}
			}
		})
	}
}

func TestParsePlaceholders(t *testing.T) {
	doc := "version: v1\nauth: {type: static, username: u, password: p}\nlisteners: [{name: l, protocol: TURN-UDP, port: 3478}]\nrelay: {address: $(POD_IP)}\n"
	c, err := Parse([]byte(doc), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.Address != "10.244.0.7" || c.Relay.MinPort != DefaultRelayMinPort {
		t.Fatalf("relay %+v", c.Relay)
	}
	if _, err := Parse([]byte(doc), nil); err == nil || !strings.HasPrefix(err.Error(), "parse config: relay.address") {
		t.Fatalf("error %v, want one naming relay.address", err)
	}
	if _, err := Parse([]byte(doc+"bogus: 1\n"), testEnv); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("error %v, want one naming the unknown field", err)
	}
}

// TestParsePlaceholderBeforeDefaults: the relay address defaults to the
// first listener's, so a listener placeholder must be replaced first or the
// relay would get no address (a placeholder is not an IP).
func TestParsePlaceholderBeforeDefaults(t *testing.T) {
	doc := "version: v1\nauth: {type: static, username: u, password: p}\nlisteners: [{name: l, protocol: TURN-UDP, address: $(NODE_IP), port: 3478}]\n"
	c, err := Parse([]byte(doc), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listeners[0].Address != "192.168.1.10" || c.Relay.Address != "192.168.1.10" {
		t.Fatalf("listener address %q, relay address %q; want the node IP for both", c.Listeners[0].Address, c.Relay.Address)
	}
}

// TestParseNodePublicAddresses: under hostNetwork the operator lists each
// node's ExternalIP, and each ternd advertises its own node's.
func TestParseNodePublicAddresses(t *testing.T) {
	doc := `version: v1
auth: {type: static, username: u, password: p}
listeners: [{name: l, protocol: TURN-UDP, port: 3478}]
relay:
  address: $(NODE_IP)
  nodePublicAddresses: {node-a: 203.0.113.1, node-b: 203.0.113.2}
`
	for _, tc := range []struct {
		name, node, publicAddr string
		extra                  string
	}{
		{"listed node", "node-b", "203.0.113.2", ""},
		{"node without an ExternalIP", "node-c", "", ""},
		{"unknown node", "", "", ""},
		{"listed node over relay.publicAddress", "node-a", "203.0.113.1", "  publicAddress: 198.51.100.9\n"},
		{"unlisted node keeps relay.publicAddress", "node-c", "198.51.100.9", "  publicAddress: 198.51.100.9\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"NODE_IP": "192.168.1.10", "NODE_NAME": tc.node}
			c, err := Parse([]byte(doc+tc.extra), func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if c.Relay.Address != "192.168.1.10" || c.Relay.PublicAddress != tc.publicAddr {
				t.Fatalf("relay address %q, public %q; want 192.168.1.10 and %q", c.Relay.Address, c.Relay.PublicAddress, tc.publicAddr)
			}
		})
	}
	if _, err := Parse([]byte(strings.Replace(doc, "203.0.113.2", "node-b.example", 1)), testEnv); err == nil ||
		!strings.Contains(err.Error(), `relay.nodePublicAddresses["node-b"]: must be an IP address`) {
		t.Fatalf("error %v, want one naming the bad entry", err)
	}
}
