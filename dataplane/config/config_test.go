package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// validConfig returns a minimal config that passes Validate once defaulted.
func validConfig() *Config {
	c := &Config{
		Version:   Version,
		Auth:      Auth{Type: AuthStatic, Username: "user", Password: "pass"},
		Listeners: []Listener{{Name: "udp", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: 3478, Routes: []string{"local"}}},
		Clusters:  []Cluster{{Name: "local", Endpoints: []string{"127.0.0.1/32"}}},
	}
	c.SetDefaults()
	return c
}

// fieldErrors returns the *FieldErrors joined in err.
func fieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		if errors.As(err, &fe) && fe == err {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// TestJSONNames pins the wire names of the contract: the operator renders
// them and ternd reads them, so a renamed tag is a breaking change.
func TestJSONNames(t *testing.T) {
	c := validConfig()
	c.Admin = Admin{Name: "n", LogLevel: "info", MetricsAddress: ":1", HealthAddress: ":2"}
	c.Auth.SharedSecret = "s"
	c.Listeners[0].PublicAddress, c.Listeners[0].PublicPort = "192.0.2.1", 3478
	c.Listeners[0].Cert, c.Listeners[0].Key = "c", "k"
	c.Clusters[0].MinPort, c.Clusters[0].MaxPort = 1, 2
	c.Relay.PublicAddress = "192.0.2.1"
	c.Limits = Limits{MaxLifetime: 1, NonceLifetime: 2, AllocationsPerUser: 3, AllocationsPerIP: 4, MaxAllocations: 5,
		AuthFailureBurst: 6, AuthFailureRate: 7, StrictChannelNumbers: true, LegacyChannelNumbers: true,
		ConnectionIdleTimeout: 8, ConnectionsPerIP: 9, MaxConnections: 10, PartialFrameTimeout: 11}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, name := range []string{
		"version", "admin", "name", "logLevel", "metricsAddress", "healthAddress",
		"auth", "type", "realm", "username", "password", "sharedSecret",
		"listeners", "protocol", "address", "port", "publicAddress", "publicPort", "cert", "key", "routes",
		"clusters", "endpoints", "minPort", "maxPort",
		"relay", "limits", "maxLifetime", "nonceLifetime", "allocationsPerUser", "allocationsPerIP", "maxAllocations",
		"authFailureBurst", "authFailureRate", "strictChannelNumbers", "legacyChannelNumbers",
		"connectionIdleTimeout", "connectionsPerIP", "maxConnections", "partialFrameTimeout",
	} {
		if !strings.Contains(got, `"`+name+`":`) {
			t.Errorf("marshaled config lacks %q: %s", name, got)
		}
	}
}
