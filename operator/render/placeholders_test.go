package render

import (
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

func TestExpandPlaceholders(t *testing.T) {
	env := map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "192.168.1.10"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		cfg     config.Config
		want    config.Config
		wantErr string
	}{
		{
			name: "relay address from the pod, public from the node",
			cfg:  config.Config{Relay: config.Relay{Address: PlaceholderPodIP, PublicAddress: PlaceholderNodeIP}},
			want: config.Config{Relay: config.Relay{Address: "10.244.0.7", PublicAddress: "192.168.1.10"}},
		},
		{
			name: "listener fields, and only whole values",
			cfg: config.Config{
				Listeners: []config.Listener{{Address: PlaceholderNodeIP, PublicAddress: "x" + PlaceholderPodIP}},
				Auth:      config.Auth{Password: PlaceholderPodIP},
			},
			want: config.Config{
				Listeners: []config.Listener{{Address: "192.168.1.10", PublicAddress: "x" + PlaceholderPodIP}},
				Auth:      config.Auth{Password: PlaceholderPodIP},
			},
		},
		{
			name:    "missing variable names the field",
			cfg:     config.Config{Listeners: []config.Listener{{}, {Address: "$(POD_IP)"}}},
			wantErr: "listeners[1].address",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			ge := getenv
			if tt.wantErr != "" {
				ge = func(string) string { return "" }
			}
			err := ExpandPlaceholders(&c, ge)
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

func TestParseConfig(t *testing.T) {
	doc := "version: v1\nauth: {type: static, username: u, password: p}\nlisteners: [{name: l, protocol: TURN-UDP, port: 3478}]\nrelay: {address: $(POD_IP)}\n"
	c, err := ParseConfig([]byte(doc), func(k string) string { return map[string]string{"POD_IP": "10.0.0.1"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.Address != "10.0.0.1" || c.Relay.MinPort != config.DefaultRelayMinPort {
		t.Fatalf("relay %+v", c.Relay)
	}
	if _, err := ParseConfig([]byte(doc), func(string) string { return "" }); err == nil {
		t.Fatal("want an error without POD_IP")
	}
	if _, err := ParseConfig([]byte(doc+"bogus: 1\n"), func(string) string { return "10.0.0.1" }); err == nil {
		t.Fatal("want an error for an unknown field")
	}
}
