package config

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// TestLocalExample keeps deploy/examples/local.yaml loadable and saying
// what its comments claim.
func TestLocalExample(t *testing.T) {
	c, err := Load("../../deploy/examples/local.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Version: "v1",
		Admin:   Admin{Name: "tern-local", LogLevel: "info", MetricsAddress: "127.0.0.1:8080", HealthAddress: "127.0.0.1:8086"},
		Auth:    Auth{Type: AuthStatic, Realm: "stunner.l7mp.io", Username: "user", Password: "pass"},
		Listeners: []Listener{{
			Name: "udp", Protocol: protocol.TURNUDP, Address: "127.0.0.1", Port: 3478, Routes: []string{"local"},
		}},
		Clusters: []Cluster{{Name: "local", Endpoints: []string{"127.0.0.1/32"}}},
		Relay:    Relay{Address: "127.0.0.1", MinPort: 20000, MaxPort: 29999},
		// nonceLifetime, the quotas, the throttle and the connection limits defaulted
		Limits: Limits{MaxLifetime: 600, NonceLifetime: 600, AllocationsPerUser: NoLimit, AllocationsPerIP: 200,
			AuthFailureBurst: 10, AuthFailureRate: 2, ConnectionIdleTimeout: 30, ConnectionsPerIP: 500, MaxConnections: 10000},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func ExampleParse() {
	// A config as tern-operator renders it: the relay address is the pod's
	// IP, which only the pod knows (os.Getenv would be the getenv in ternd).
	doc := []byte(`
version: v1
auth: {type: plaintext, username: user, password: pass}
listeners:
  - {name: udp, protocol: udp, port: 3478, routes: [media]}
clusters:
  - {name: media, endpoints: ["10.0.0.7/24"]}
relay: {address: $(POD_IP)}
`)
	env := map[string]string{"POD_IP": "10.244.0.7"}
	c, err := Parse(doc, func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := c.Clusters[0].Prefixes()
	fmt.Println(c.Auth.Type, c.Listeners[0].Protocol, c.Listeners[0].Address, c.Relay.Address, c.Relay.MinPort, c.Relay.MaxPort, p)

	// Without the variable the placeholder cannot be replaced.
	_, err = Parse(doc, nil)
	fmt.Println(err)

	_, err = Parse([]byte(`{"version": "v1", "listeners": [{"name": "udp", "protocol": "TURN-UDP", "port": 70000}]}`), nil)
	fmt.Println(err)
	// Output:
	// static TURN-UDP 0.0.0.0 10.244.0.7 20000 29999 [10.0.0.0/24]
	// parse config: relay.address: $(POD_IP) needs the environment variable POD_IP
	// auth.username: required for static auth
	// auth.password: required for static auth (or auth.passwordFile)
	// listeners[0].port: must be 1-65535, got 70000
}
