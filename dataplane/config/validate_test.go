package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

func TestValidateOK(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Config)
	}{
		{"minimal", func(*Config) {}},
		{"ephemeral", func(c *Config) { c.Auth = Auth{Type: AuthEphemeral, Realm: "r", SharedSecret: "s"} }},
		{"tls with cert", func(c *Config) {
			c.Listeners[0].Protocol, c.Listeners[0].Cert, c.Listeners[0].Key = protocol.TURNTLS, "/c.pem", "/k.pem"
		}},
		{"ipv6 everywhere", func(c *Config) {
			c.Listeners[0].Address, c.Listeners[0].PublicAddress, c.Relay.Address = "::", "2001:db8::1", "::1"
			c.Clusters[0].Endpoints = []string{"2001:db8::/32", "::1"}
		}},
		{"cluster port range", func(c *Config) { c.Clusters[0].MinPort, c.Clusters[0].MaxPort = 5000, 5000 }},
		{"cluster only maxPort", func(c *Config) { c.Clusters[0].MaxPort = 5000 }},
		{"no clusters and no routes", func(c *Config) { c.Clusters, c.Listeners[0].Routes = nil, nil }},
		{"admin addresses", func(c *Config) { c.Admin.MetricsAddress, c.Admin.HealthAddress = ":8080", "localhost:8086" }},
		{"admin ipv6 address", func(c *Config) { c.Admin.MetricsAddress = "[::1]:8080" }},
		{"stunner log level", func(c *Config) { c.Admin.LogLevel = "all:DEBUG,turn:INFO" }},
		{"max realm", func(c *Config) { c.Auth.Realm = strings.Repeat("é", maxRealmBytes/2) }},
		{"relay single port", func(c *Config) { c.Relay.MinPort, c.Relay.MaxPort = 1, 1 }},
		{"password file", func(c *Config) { c.Auth.Password, c.Auth.PasswordFile = "", "/etc/tern/auth/password" }},
		{"shared secret file", func(c *Config) { c.Auth = Auth{Type: AuthEphemeral, Realm: "r", SharedSecretFile: "/s"} }},
		{"offload auto", func(c *Config) { c.Offload = Offload{Engine: offloadmode.Auto, Interfaces: []string{"eth0", "lo"}} }},
		{"offload clsact", func(c *Config) { c.Offload = Offload{Engine: offloadmode.TC, Attach: offloadmode.AttachClsact} }},
		{"offload unset", func(c *Config) { c.Offload = Offload{} }},
		{"stun mode without credentials", func(c *Config) { c.STUNMode, c.Auth = true, Auth{Type: AuthStatic, Realm: "r"} }},
		{"stun mode ephemeral without secret", func(c *Config) { c.STUNMode, c.Auth = true, Auth{Type: AuthEphemeral, Realm: "r"} }},
		{"tls with upstream", func(c *Config) {
			tlsListener(c)
			c.Listeners[0].Upstream = &TLSUpstream{Address: "ingress.web.svc:443", TURNServerNames: []string{"turn.example.com"}, ClientHelloTimeout: 3}
		}},
		{"alternates", func(c *Config) {
			c.Alternates = []string{"10.0.0.2:3478", "[2001:db8::2]:3478", "turn-1.example.com:443", "10.0.0.3:0"}
		}},
		{"node public addresses", func(c *Config) {
			c.Relay.NodePublicAddresses = map[string]string{"node-a": "203.0.113.1", "node-b": "2001:db8::1"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.modify(c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestValidateRules has one case per rule; want is the exact "field: msg"
// prefix the error must contain, so a rule reporting the wrong path fails.
func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"upstream on tcp", func(c *Config) { c.Listeners[0].Upstream = &TLSUpstream{Address: "web:443"} },
			`listeners[0].upstream: only a TURN-TLS listener can have an upstream, not TURN-UDP`},
		{"upstream address", func(c *Config) { tlsListener(c); c.Listeners[0].Upstream = &TLSUpstream{Address: "web"} },
			`listeners[0].upstream.address: must be host:port with a numeric port, got "web"`},
		{"upstream timeout", func(c *Config) {
			tlsListener(c)
			c.Listeners[0].Upstream = &TLSUpstream{Address: "web:443", ClientHelloTimeout: -1}
		},
			`listeners[0].upstream.clientHelloTimeout: must be 0 (the default) or more seconds, got -1`},
		{"upstream turn name", func(c *Config) {
			tlsListener(c)
			c.Listeners[0].Upstream = &TLSUpstream{Address: "web:443", TURNServerNames: []string{"ok.example", "a b"}}
		}, `listeners[0].upstream.turnServerNames[1]: must be a host name, got "a b"`},
		{"version empty", func(c *Config) { c.Version = "" }, `version: must be "v1", got ""`},
		{"version wrong", func(c *Config) { c.Version = "v2" }, `version: must be "v1", got "v2"`},
		{"offload engine unknown", func(c *Config) { c.Offload.Engine = "eBPF" }, `offload.engine: must be None, Auto, XDP or TC, got "eBPF"`},
		{"offload engine not normalized", func(c *Config) { c.Offload.Engine = "tcmux" }, `offload.engine: must be spelled "TC"`},
		{"offload attach unknown", func(c *Config) { c.Offload.Attach = "tc" }, `offload.attach: must be Auto, TCX or Clsact, got "tc"`},
		{"offload attach not normalized", func(c *Config) { c.Offload.Attach = "clsact" }, `offload.attach: must be spelled "Clsact"`},
		{"offload interface empty", func(c *Config) { c.Offload.Interfaces = []string{""} }, `offload.interfaces[0]: must be an interface name`},
		{"offload interface too long", func(c *Config) { c.Offload.Interfaces = []string{"abcdefghijklmnop"} }, `offload.interfaces[0]: must be an interface name`},
		{"offload interface slash", func(c *Config) { c.Offload.Interfaces = []string{"eth0", "a/b"} }, `offload.interfaces[1]: must be an interface name`},
		{"offload interface twice", func(c *Config) { c.Offload.Interfaces = []string{"eth0", "eth0"} }, `offload.interfaces[1]: "eth0" is already offload.interfaces[0]`},

		{"alternate without port", func(c *Config) { c.Alternates = []string{"10.0.0.2"} }, `alternates[0]: must be host:port`},
		{"alternate named port", func(c *Config) { c.Alternates = []string{"10.0.0.2:3478", "10.0.0.3:turn"} }, `alternates[1]: must be host:port`},
		{"alternate port range", func(c *Config) { c.Alternates = []string{"10.0.0.2:65536"} }, `alternates[0]: must be host:port`},
		{"alternate empty host", func(c *Config) { c.Alternates = []string{":3478"} }, `alternates[0]: must be host:port`},
		{"alternate bad name", func(c *Config) { c.Alternates = []string{"bad name:3478"} }, `alternates[0]: must be host:port with a host name or IP address, got`},
		{"alternate unspecified", func(c *Config) { c.Alternates = []string{"0.0.0.0:3478"} }, `alternates[0]: must name a unicast address`},
		{"alternate zone", func(c *Config) { c.Alternates = []string{"[fe80::1%eth0]:3478"} }, `alternates[0]: must name a unicast address`},
		{"alternate twice", func(c *Config) { c.Alternates = []string{"10.0.0.2:3478", "[::ffff:10.0.0.2]:3478"} }, `alternates[1]: "[::ffff:10.0.0.2]:3478" is already alternates[0]`},

		{"log level", func(c *Config) { c.Admin.LogLevel = "verbose" }, `admin.logLevel: unknown log level "verbose"`},
		{"log level stunner form", func(c *Config) { c.Admin.LogLevel = "all:LOUD" }, `admin.logLevel: invalid log level "all:LOUD"`},
		{"metrics address", func(c *Config) { c.Admin.MetricsAddress = "8080" }, `admin.metricsAddress: must be host:port`},
		{"health address port", func(c *Config) { c.Admin.HealthAddress = "localhost:http" }, `admin.healthAddress: must be host:port`},
		{"health address range", func(c *Config) { c.Admin.HealthAddress = "localhost:65536" }, `admin.healthAddress: must be host:port`},

		{"auth type", func(c *Config) { c.Auth.Type = "oauth" }, `auth.type: must be "static" or "ephemeral", got "oauth"`},
		{"auth type alias unnormalized", func(c *Config) { c.Auth.Type = "plaintext" }, `auth.type: must be "static" or "ephemeral", got "plaintext"`},
		{"realm empty", func(c *Config) { c.Auth.Realm = "" }, `auth.realm: must not be empty`},
		{"realm too long", func(c *Config) { c.Auth.Realm = strings.Repeat("a", 764) }, `auth.realm: must be at most 763 bytes (RFC 8489), got 764`},
		{"realm control char", func(c *Config) { c.Auth.Realm = "a\nb" }, `auth.realm: must not contain control characters`},
		{"realm invalid utf8", func(c *Config) { c.Auth.Realm = "a\xffb" }, `auth.realm: must be valid UTF-8`},
		{"static username", func(c *Config) { c.Auth.Username = "" }, `auth.username: required for static auth`},
		{"static password", func(c *Config) { c.Auth.Password = "" }, `auth.password: required for static auth (or auth.passwordFile)`},
		{"static password twice", func(c *Config) { c.Auth.PasswordFile = "/p" }, `auth.passwordFile: set either auth.password or auth.passwordFile, not both`},
		{"ephemeral secret", func(c *Config) { c.Auth.Type = AuthEphemeral }, `auth.sharedSecret: required for ephemeral auth (or auth.sharedSecretFile)`},
		{"ephemeral secret twice", func(c *Config) {
			c.Auth = Auth{Type: AuthEphemeral, Realm: "r", SharedSecret: "s", SharedSecretFile: "/s"}
		},
			`auth.sharedSecretFile: set either auth.sharedSecret or auth.sharedSecretFile, not both`},

		{"no listeners", func(c *Config) { c.Listeners = nil }, `listeners: at least one listener is required`},
		{"listener name", func(c *Config) { c.Listeners[0].Name = "" }, `listeners[0].name: must not be empty`},
		{"listener name duplicate", func(c *Config) { c.Listeners = append(c.Listeners, c.Listeners[0]) },
			`listeners[1].name: duplicate name "udp" (also listeners[0])`},
		{"protocol", func(c *Config) { c.Listeners[0].Protocol = "SCTP" },
			`listeners[0].protocol: must be one of TURN-UDP, TURN-TCP, TURN-TLS, TURN-DTLS, got "SCTP"`},
		{"address", func(c *Config) { c.Listeners[0].Address = "localhost" }, `listeners[0].address: must be an IP address, got "localhost"`},
		{"port zero", func(c *Config) { c.Listeners[0].Port = 0 }, `listeners[0].port: must be 1-65535, got 0`},
		{"port high", func(c *Config) {
			c.Listeners = append(c.Listeners, Listener{Name: "b", Protocol: protocol.TURNTCP, Address: "::", Port: 70000})
		}, `listeners[1].port: must be 1-65535, got 70000`},
		{"public port", func(c *Config) { c.Listeners[0].PublicPort = -1 }, `listeners[0].publicPort: must be 0-65535, got -1`},
		{"public port high", func(c *Config) { c.Listeners[0].PublicPort = 65536 }, `listeners[0].publicPort: must be 0-65535, got 65536`},
		{"public address", func(c *Config) { c.Listeners[0].PublicAddress = "example.com" },
			`listeners[0].publicAddress: must be an IP address, got "example.com"`},
		{"tls cert", func(c *Config) { c.Listeners[0].Protocol, c.Listeners[0].Key = protocol.TURNTLS, "k" }, `listeners[0].cert: required for TURN-TLS`},
		{"dtls key", func(c *Config) { c.Listeners[0].Protocol, c.Listeners[0].Cert = protocol.TURNDTLS, "c" }, `listeners[0].key: required for TURN-DTLS`},
		{"route", func(c *Config) { c.Listeners[0].Routes = []string{"local", "nope"} }, `listeners[0].routes[1]: no cluster named "nope"`},

		{"cluster name", func(c *Config) { c.Clusters[0].Name, c.Listeners[0].Routes = "", nil }, `clusters[0].name: must not be empty`},
		{"cluster name duplicate", func(c *Config) { c.Clusters = append(c.Clusters, c.Clusters[0]) },
			`clusters[1].name: duplicate name "local" (also clusters[0])`},
		{"endpoint", func(c *Config) { c.Clusters[0].Endpoints = []string{"10.0.0.1", "10.0.0.0/33"} },
			`clusters[0].endpoints[1]: must be an IP address or CIDR prefix, got "10.0.0.0/33"`},
		{"endpoint hostname", func(c *Config) { c.Clusters[0].Endpoints = []string{"db.svc"} },
			`clusters[0].endpoints[0]: must be an IP address or CIDR prefix, got "db.svc"`},
		{"endpoint zone", func(c *Config) { c.Clusters[0].Endpoints = []string{"fe80::1%eth0"} },
			`clusters[0].endpoints[0]: must be an IP address or CIDR prefix`},
		{"cluster minPort", func(c *Config) { c.Clusters[0].MinPort = -1 }, `clusters[0].minPort: must be 0-65535, got -1`},
		{"cluster maxPort", func(c *Config) { c.Clusters[0].MaxPort = 65536 }, `clusters[0].maxPort: must be 0-65535, got 65536`},
		{"cluster min > max", func(c *Config) { c.Clusters[0].MinPort, c.Clusters[0].MaxPort = 6000, 5000 },
			`clusters[0].minPort: must not exceed maxPort (5000), got 6000`},
		{"cluster min without max", func(c *Config) { c.Clusters[0].MinPort = 6000 },
			`clusters[0].minPort: must not exceed maxPort (0), got 6000`},

		{"relay address", func(c *Config) { c.Relay.Address = "" }, `relay.address: must be an IP address, got ""`},
		{"relay public address", func(c *Config) { c.Relay.PublicAddress = "node" }, `relay.publicAddress: must be an IP address, got "node"`},
		{"relay minPort", func(c *Config) { c.Relay.MinPort = 0 }, `relay.minPort: must be 1-65535, got 0`},
		{"node public address", func(c *Config) {
			c.Relay.NodePublicAddresses = map[string]string{"node-a": "203.0.113.1", "node-b": "b.example"}
		},
			`relay.nodePublicAddresses["node-b"]: must be an IP address, got "b.example"`},
		{"node public address without node", func(c *Config) { c.Relay.NodePublicAddresses = map[string]string{"": "203.0.113.1"} },
			`relay.nodePublicAddresses[""]: must name a node`},
		{"relay maxPort", func(c *Config) { c.Relay.MaxPort = 65536 }, `relay.maxPort: must be 1-65535, got 65536`},
		{"relay min > max", func(c *Config) { c.Relay.MinPort, c.Relay.MaxPort = 30000, 20000 },
			`relay.minPort: must not exceed maxPort (20000), got 30000`},
		{"relay extra address", func(c *Config) { c.Relay.ExtraAddresses = []RelayAddress{{Address: "127.0.0.2"}, {Address: "relay2"}} },
			`relay.extraAddresses[1].address: must be an IP address, got "relay2"`},
		{"relay extra address repeated", func(c *Config) {
			c.Relay.ExtraAddresses = []RelayAddress{{Address: "127.0.0.2"}, {Address: "127.0.0.2"}}
		}, `relay.extraAddresses[1].address: 127.0.0.2 is already relay.extraAddresses[0].address`},
		{"relay extra address is the main one", func(c *Config) { c.Relay.ExtraAddresses = []RelayAddress{{Address: c.Relay.Address}} },
			`relay.extraAddresses[0].address: 127.0.0.1 is already relay.address`},
		{"relay extra public address", func(c *Config) {
			c.Relay.ExtraAddresses = []RelayAddress{{Address: "127.0.0.2", PublicAddress: "x"}}
		}, `relay.extraAddresses[0].publicAddress: must be an IP address, got "x"`},

		{"maxLifetime", func(c *Config) { c.Limits.MaxLifetime = -1 }, `limits.maxLifetime: must not be negative, got -1`},
		{"nonceLifetime", func(c *Config) { c.Limits.NonceLifetime = -1 }, `limits.nonceLifetime: must not be negative, got -1`},
		{"allocationsPerUser", func(c *Config) { c.Limits.AllocationsPerUser = -2 }, `limits.allocationsPerUser: must be -1 (no limit), 0 (the default) or positive, got -2`},
		{"allocationsPerIP", func(c *Config) { c.Limits.AllocationsPerIP = -2 }, `limits.allocationsPerIP: must be -1 (no limit), 0 (the default) or positive, got -2`},
		{"maxAllocations", func(c *Config) { c.Limits.MaxAllocations = -2 }, `limits.maxAllocations: must be -1 (no limit), 0 (the default) or positive, got -2`},
		{"allocationImbalancePercent", func(c *Config) { c.Limits.AllocationImbalancePercent = -1 }, `limits.allocationImbalancePercent: must be 0 (off) to 1000, got -1`},
		{"authFailureBurst", func(c *Config) { c.Limits.AuthFailureBurst = -2 }, `limits.authFailureBurst: must be -1 (no limit), 0 (the default) or positive, got -2`},
		{"authFailureRate", func(c *Config) { c.Limits.AuthFailureRate = -5 }, `limits.authFailureRate: must be -1 (no limit), 0 (the default) or positive, got -5`},
		{"connectionIdleTimeout", func(c *Config) { c.Limits.ConnectionIdleTimeout = -1 }, `limits.connectionIdleTimeout: must not be negative, got -1`},
		{"partialFrameTimeout", func(c *Config) { c.Limits.PartialFrameTimeout = -1 }, `limits.partialFrameTimeout: must not be negative, got -1`},
		{"connectionsPerIP", func(c *Config) { c.Limits.ConnectionsPerIP = -1 }, `limits.connectionsPerIP: must not be negative, got -1`},
		{"maxConnections", func(c *Config) { c.Limits.MaxConnections = -1 }, `limits.maxConnections: must not be negative, got -1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.modify(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want %q", tc.want)
			}
			fes := fieldErrors(err)
			if len(fes) != 1 || !strings.HasPrefix(fes[0].Error(), tc.want) {
				t.Errorf("Validate:\n%v\nwant exactly one error starting %q", err, tc.want)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := validConfig()
	c.Version = ""
	c.Listeners[0].Port = 0
	c.Relay.MaxPort = 0
	err := c.Validate()
	var fields []string
	for _, fe := range fieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	if want := []string{"version", "listeners[0].port", "relay.maxPort"}; !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %q, want %q (in document order)", fields, want)
	}
}

func TestFieldErrorString(t *testing.T) {
	e := &FieldError{Field: "listeners[1].port", Msg: "must be 1-65535, got 70000"}
	if got, want := e.Error(), "listeners[1].port: must be 1-65535, got 70000"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPrefixes(t *testing.T) {
	cl := Cluster{Name: "c", Endpoints: []string{"10.0.0.5", "10.0.0.7/24", "2001:db8::1", "2001:db8::1/64", "0.0.0.0/0"}}
	got, err := cl.Prefixes()
	if err != nil {
		t.Fatal(err)
	}
	var want []netip.Prefix
	for _, s := range []string{"10.0.0.5/32", "10.0.0.0/24", "2001:db8::1/128", "2001:db8::/64", "0.0.0.0/0"} {
		want = append(want, netip.MustParsePrefix(s))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, err := (Cluster{}).Prefixes(); err != nil || len(got) != 0 {
		t.Errorf("empty cluster: %v, %v", got, err)
	}
	for _, bad := range []string{"", "10.0.0.256", "10.0.0.0/33", "host", "fe80::1%eth0", "10.0.0.0/-1"} {
		if _, err := (Cluster{Name: "c", Endpoints: []string{bad}}).Prefixes(); err == nil || !strings.Contains(err.Error(), `cluster "c"`) {
			t.Errorf("endpoint %q: error %v, want one naming the cluster", bad, err)
		}
	}
}

// tlsListener makes c's first listener a TURN-TLS one.
func tlsListener(c *Config) {
	c.Listeners[0].Protocol, c.Listeners[0].Cert, c.Listeners[0].Key = protocol.TURNTLS, "/c.pem", "/k.pem"
}
