package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

const minimalYAML = `
version: v1
auth:
  username: user
  password: pass
listeners:
  - name: udp
    protocol: TURN-UDP
    port: 3478
`

const minimalJSON = `{
  "version": "v1",
  "auth": {"username": "user", "password": "pass"},
  "listeners": [{"name": "udp", "protocol": "TURN-UDP", "port": 3478}]
}`

func TestParseDefaults(t *testing.T) {
	want := &Config{
		Version: "v1",
		Admin:   Admin{LogLevel: "info"},
		Auth:    Auth{Type: AuthStatic, Realm: "stunner.l7mp.io", Username: "user", Password: "pass"},
		Listeners: []Listener{{
			Name: "udp", Protocol: protocol.TURNUDP, Address: "0.0.0.0", Port: 3478,
		}},
		Relay: Relay{Address: "127.0.0.1", MinPort: 20000, MaxPort: 29999},
		// Quotas and the throttle are on by default; static auth's one
		// username has no per-user quota.
		Limits: Limits{MaxLifetime: 600, NonceLifetime: 600, AllocationsPerUser: NoLimit, AllocationsPerIP: 200,
			AuthFailureBurst: 10, AuthFailureRate: 2, ConnectionIdleTimeout: 30, ConnectionsPerIP: 500, MaxConnections: 10000},
	}
	for name, in := range map[string]string{"yaml": minimalYAML, "json": minimalJSON} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(in), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got  %+v\nwant %+v", c, want)
			}
		})
	}
}

func TestSetDefaultsKeepsSetValues(t *testing.T) {
	c := &Config{
		Admin:     Admin{LogLevel: "debug"},
		Auth:      Auth{Type: AuthEphemeral, Realm: "example.com"},
		Listeners: []Listener{{Address: "10.0.0.1"}},
		Relay:     Relay{Address: "10.0.0.2", MinPort: 1000, MaxPort: 2000},
		Limits: Limits{MaxLifetime: 60, NonceLifetime: 30, AllocationsPerUser: 5, AllocationsPerIP: NoLimit,
			MaxAllocations: 7, AuthFailureBurst: 3, AuthFailureRate: NoLimit,
			ConnectionIdleTimeout: 5, ConnectionsPerIP: 7, MaxConnections: 9},
	}
	want := *c
	want.Listeners = []Listener{{Address: "10.0.0.1"}}
	c.SetDefaults()
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("got  %+v\nwant %+v", *c, want)
	}
	if c.Version != "" {
		t.Errorf("Version defaulted to %q; it is required and must stay empty", c.Version)
	}
}

func TestSetDefaultsRelayAddress(t *testing.T) {
	for _, tc := range []struct {
		listeners []Listener
		want      string
	}{
		{nil, "127.0.0.1"},
		{[]Listener{{Address: ""}}, "127.0.0.1"},
		{[]Listener{{Address: "0.0.0.0"}}, "127.0.0.1"},
		{[]Listener{{Address: "::"}}, "127.0.0.1"},
		{[]Listener{{Address: "not-an-ip"}}, "127.0.0.1"},
		{[]Listener{{Address: "10.1.2.3"}, {Address: "10.9.9.9"}}, "10.1.2.3"},
		{[]Listener{{Address: "2001:db8::1"}}, "2001:db8::1"},
	} {
		c := &Config{Listeners: tc.listeners}
		c.SetDefaults()
		if c.Relay.Address != tc.want {
			t.Errorf("listeners %+v: relay address %q, want %q", tc.listeners, c.Relay.Address, tc.want)
		}
	}
}

func TestProtocolAliases(t *testing.T) {
	for in, want := range map[string]protocol.Protocol{
		"TURN-UDP": protocol.TURNUDP, "turn-udp": protocol.TURNUDP, "udp": protocol.TURNUDP, "UDP": protocol.TURNUDP,
		"turn-tcp": protocol.TURNTCP, "TCP": protocol.TURNTCP,
		"Turn-Tls": protocol.TURNTLS, "tls": protocol.TURNTLS,
		"turn-dtls": protocol.TURNDTLS, "DTLS": protocol.TURNDTLS,
		"sctp": "sctp", "": "",
	} {
		c := &Config{Listeners: []Listener{{Protocol: protocol.Protocol(in)}}}
		c.SetDefaults()
		if got := c.Listeners[0].Protocol; got != want {
			t.Errorf("protocol %q normalized to %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeAuthType(t *testing.T) {
	for in, want := range map[string]string{
		"static": AuthStatic, "STATIC": AuthStatic, "plaintext": AuthStatic, "PlainText": AuthStatic,
		"ephemeral": AuthEphemeral, "longterm": AuthEphemeral, "LongTerm": AuthEphemeral, "timewindowed": AuthEphemeral,
	} {
		got, err := NormalizeAuthType(in)
		if err != nil || got != want {
			t.Errorf("NormalizeAuthType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "oauth", "static "} {
		if got, err := NormalizeAuthType(in); err == nil {
			t.Errorf("NormalizeAuthType(%q) = %q, want error", in, got)
		}
	}
}

func TestParseAliases(t *testing.T) {
	in := `
version: v1
auth: {type: timewindowed, sharedSecret: s3cret}
listeners:
  - {name: a, protocol: udp, port: 3478}
  - {name: b, protocol: Turn-Tcp, port: 3478}
`
	c, err := Parse([]byte(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.Type != AuthEphemeral || c.Listeners[0].Protocol != protocol.TURNUDP || c.Listeners[1].Protocol != protocol.TURNTCP {
		t.Errorf("aliases not normalized: auth %q, protocols %q %q", c.Auth.Type, c.Listeners[0].Protocol, c.Listeners[1].Protocol)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"unknown top-level field", minimalYAML + "bogus: 1\n", []string{`"bogus"`}},
		{"unknown nested field", strings.Replace(minimalYAML, "port: 3478", "port: 3478\n    tls: true", 1), []string{`"tls"`}},
		{"unknown field json", `{"version":"v1","listners":[]}`, []string{`"listners"`}},
		{"duplicate field", minimalYAML + "version: v1\n", []string{"version"}},
		{"wrong type", strings.Replace(minimalYAML, "port: 3478", "port: [1]", 1), []string{"port"}},
		{"not yaml", "version: [v1\n", []string{"parse config"}},
		{"not an object", "[1, 2]", []string{"parse config"}},
		{"validation", strings.Replace(minimalYAML, "port: 3478", "port: 70000", 1), []string{"listeners[0].port: must be 1-65535, got 70000"}},
		{"empty", "", []string{"version:", "listeners:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in), nil)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with error %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseValidationErrorIsFieldErrors(t *testing.T) {
	_, err := Parse([]byte(`{"version":"v2","auth":{"type":"oauth"}}`), nil)
	fes := fieldErrors(err)
	if len(fes) < 3 {
		t.Fatalf("want several FieldErrors, got %v", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "version" {
		t.Errorf("errors.As: first field error %+v, want version", fe)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(minimalYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"version":"v1","extra":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(good, nil); err != nil || c.Listeners[0].Name != "udp" {
		t.Errorf("Load(good) = %+v, %v", c, err)
	}
	_, err := Load(bad, nil)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("Load(bad) error %v: want path and field name", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	_, err = Load(missing, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error %v: want ErrNotExist naming the path", err)
	}
}

// TestQuotaDefaults: quotas are on unless a config turns them off with
// NoLimit; the per-user quota depends on the auth type; the total is left
// to the relay ports.
func TestQuotaDefaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		auth  string
		extra int
		set   Limits
		want  Limits
	}{
		{"static", AuthStatic, 0, Limits{}, Limits{AllocationsPerUser: NoLimit, AllocationsPerIP: 200, AuthFailureBurst: 10, AuthFailureRate: 2}},
		{"ephemeral", AuthEphemeral, 0, Limits{}, Limits{AllocationsPerUser: 100, AllocationsPerIP: 200, AuthFailureBurst: 10, AuthFailureRate: 2}},
		{"total left to the relay ports", AuthStatic, 2, Limits{}, Limits{AllocationsPerUser: NoLimit, AllocationsPerIP: 200, AuthFailureBurst: 10, AuthFailureRate: 2}},
		{"all off", AuthEphemeral, 0,
			Limits{AllocationsPerUser: NoLimit, AllocationsPerIP: NoLimit, MaxAllocations: NoLimit, AuthFailureBurst: NoLimit, AuthFailureRate: NoLimit},
			Limits{AllocationsPerUser: NoLimit, AllocationsPerIP: NoLimit, MaxAllocations: NoLimit, AuthFailureBurst: NoLimit, AuthFailureRate: NoLimit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Auth: Auth{Type: tc.auth}, Limits: tc.set}
			for i := range tc.extra {
				c.Relay.ExtraAddresses = append(c.Relay.ExtraAddresses, RelayAddress{Address: fmt.Sprintf("10.0.0.%d", i+1)})
			}
			c.SetDefaults()
			got := c.Limits
			got.MaxLifetime, got.NonceLifetime = 0, 0
			got.ConnectionIdleTimeout, got.ConnectionsPerIP, got.MaxConnections = 0, 0, 0 // TestDefaults has them
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseOffload: offload.engine takes STUNner's values in any case and
// TCMux as TC, is left unset (Auto) when omitted, and anything else is an
// error naming the field.
func TestParseOffload(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "", ""},
		{"offload: {engine: none}", offloadmode.None, ""},
		{"offload: {engine: auto, interfaces: [eth0]}", offloadmode.Auto, ""},
		{"offload: {engine: Xdp}", offloadmode.XDP, ""},
		{"offload: {engine: TCMux}", offloadmode.TC, ""},
		{"offload: {engine: tc}", offloadmode.TC, ""},
		{"offload: {engine: bpf}", "", `offload.engine: must be None, Auto, XDP or TC, got "bpf"`},
		{"offload: {engin: Auto}", "", `unknown field "engin"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := Parse([]byte(minimalYAML+tc.in+"\n"), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Offload.Engine != tc.want {
				t.Errorf("engine %q, want %q", c.Offload.Engine, tc.want)
			}
			if want := cmpOr(tc.want, offloadmode.Auto); c.Offload.EngineMode() != want {
				t.Errorf("EngineMode %q, want %q", c.Offload.EngineMode(), want)
			}
		})
	}
}

// TestParseOffloadAttach: offload.attach takes Auto, TCX or Clsact in any
// case, is Auto when omitted, and anything else is an error naming the
// field.
func TestParseOffloadAttach(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", offloadmode.AttachAuto, ""},
		{"offload: {attach: auto}", offloadmode.AttachAuto, ""},
		{"offload: {attach: tcx}", offloadmode.AttachTCX, ""},
		{"offload: {engine: TC, attach: CLSACT}", offloadmode.AttachClsact, ""},
		{"offload: {attach: tc}", "", `offload.attach: must be Auto, TCX or Clsact, got "tc"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := Parse([]byte(minimalYAML+tc.in+"\n"), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Offload.AttachMode() != tc.want {
				t.Errorf("AttachMode %q, want %q", c.Offload.AttachMode(), tc.want)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
