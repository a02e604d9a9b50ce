package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
)

// stunnerV1 mirrors the v1.Config schema STUNner publishes (its OpenAPI
// description, pkg/config/api/stunner_openapi.yaml, refers to the Go types of
// pkg/apis/v1 for it): every field stunnerd knows, with its JSON type. It is
// this test's own description, decoded strictly: a key or a type stunnerd
// does not know fails the decode.
type stunnerV1 struct {
	Version string `json:"version"`
	Admin   struct {
		Name                string   `json:"name"`
		LogLevel            string   `json:"loglevel"`
		MetricsEndpoint     string   `json:"metrics_endpoint"`
		HealthCheckEndpoint *string  `json:"healthcheck_endpoint"`
		UserQuota           int      `json:"user_quota"`
		OffloadEngine       string   `json:"offload_engine"`
		OffloadInterfaces   []string `json:"offload_interfaces"`
		LicenseConfig       *struct {
			Key  string `json:"key"`
			HMAC string `json:"hmac"`
		} `json:"license_config"`
	} `json:"admin"`
	Auth struct {
		Type        string            `json:"type"`
		Realm       string            `json:"realm"`
		Credentials map[string]string `json:"credentials"`
	} `json:"auth"`
	Listeners []struct {
		Name       string   `json:"name"`
		Protocol   string   `json:"protocol"`
		PublicAddr string   `json:"public_address"`
		PublicPort int      `json:"public_port"`
		Addr       string   `json:"address"`
		Port       int      `json:"port"`
		Cert       string   `json:"cert"`
		Key        string   `json:"key"`
		Routes     []string `json:"routes"`
	} `json:"listeners"`
	Clusters []struct {
		Name      string   `json:"name"`
		Type      string   `json:"type"`
		Protocol  string   `json:"protocol"`
		Endpoints []string `json:"endpoints"`
	} `json:"clusters"`
}

// decodeStunnerV1 decodes a served config as stunnerd does, which skips
// keys it does not know (sigs.k8s.io/yaml and encoding/json without
// DisallowUnknownFields), and checks that the one key it skips is
// CDSTernKey: everything else must decode strictly into STUNner's schema.
func decodeStunnerV1(t *testing.T, data []byte) (stunnerV1, json.RawMessage) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatalf("served config is not a JSON object: %v", err)
	}
	tern := top[CDSTernKey]
	delete(top, CDSTernKey)
	rest, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	var s stunnerV1
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("STUNner's v1 schema refuses the served config: %v\n%s", err, data)
	}
	return s, tern
}

// checkStunnerValid checks what STUNner's validation of a v1 config asks
// of these fields: version v1, the credential keys of the auth type, and
// per listener a name, protocol and port.
func checkStunnerValid(t *testing.T, s stunnerV1) {
	t.Helper()
	if s.Version != "v1" {
		t.Errorf("version %q, want v1", s.Version)
	}
	switch s.Auth.Type {
	case "static":
		for _, k := range []string{"username", "password"} {
			if _, ok := s.Auth.Credentials[k]; !ok {
				t.Errorf("static auth without credentials.%s", k)
			}
		}
	case "ephemeral":
		if _, ok := s.Auth.Credentials["secret"]; !ok {
			t.Error("ephemeral auth without credentials.secret")
		}
	default:
		t.Errorf("auth type %q", s.Auth.Type)
	}
	for _, l := range s.Listeners {
		if l.Name == "" || l.Protocol == "" || l.Port == 0 {
			t.Errorf("listener %+v lacks a name, protocol or port", l)
		}
	}
}

// TestCDSConfigGolden serves every golden case's Gateways as the config
// discovery service does: STUNner's schema accepts each, carries no
// credential, and its Tern document is the ConfigMap's, which loads.
func TestCDSConfigGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	served := 0
	for _, in := range ins {
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		input, _, err := Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		res := Render(input, Options{})
		for _, g := range res.Gateways {
			data, err := g.CDSConfig()
			if err != nil {
				t.Fatalf("%s: Gateway %s/%s: %v", in, g.Namespace, g.Name, err)
			}
			if g.ConfigMap == nil {
				if data != nil {
					t.Errorf("%s: Gateway %s/%s rendered no ConfigMap but serves a config", in, g.Namespace, g.Name)
				}
				continue
			}
			served++
			s, tern := decodeStunnerV1(t, data)
			checkStunnerValid(t, s)
			if s.Admin.Name != g.Config.Admin.Name || len(s.Listeners) != len(g.Config.Listeners) || len(s.Clusters) != len(g.Config.Clusters) {
				t.Errorf("%s: Gateway %s/%s: served name/listeners/clusters differ from the config", in, g.Namespace, g.Name)
			}
			for k, v := range s.Auth.Credentials {
				if k != "username" && v != "" {
					t.Errorf("%s: Gateway %s/%s: credentials.%s served", in, g.Namespace, g.Name, k)
				}
			}
			// With credentials: those of the Gateway's Secret, and the same otherwise.
			withCreds, err := g.CDSConfigWithCredentials()
			if err != nil {
				t.Fatal(err)
			}
			sc, _ := decodeStunnerV1(t, withCreds)
			checkStunnerValid(t, sc)
			if g.Secret != nil {
				key, want := "password", string(g.Secret.Data[CredentialsKeyPassword])
				if g.Config.Auth.Type == config.AuthEphemeral {
					key, want = "secret", string(g.Secret.Data[CredentialsKeySharedSecret])
				}
				if sc.Auth.Credentials[key] != want || want == "" {
					t.Errorf("%s: Gateway %s/%s: credentials.%s = %q, want the Secret's %q", in, g.Namespace, g.Name, key, sc.Auth.Credentials[key], want)
				}
			}
			want, err := yaml.YAMLToJSON([]byte(g.ConfigMap.Data[ConfigKey]))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tern, want) {
				t.Errorf("%s: Gateway %s/%s: the served Tern document is not the ConfigMap's", in, g.Namespace, g.Name)
			}
			env := map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "192.168.1.10"}
			getenv := func(k string) string { return env[k] }
			got, err := config.Parse(tern, getenv)
			if err != nil {
				t.Fatalf("%s: served Tern document does not load: %v", in, err)
			}
			fromCM, _ := config.Parse([]byte(g.ConfigMap.Data[ConfigKey]), getenv)
			if diff := cmp.Diff(fromCM, got); diff != "" {
				t.Errorf("%s: served config differs from the ConfigMap's (-cm +cds):\n%s", in, diff)
			}
		}
	}
	if served == 0 {
		t.Fatal("no golden case rendered a config")
	}
}

func TestStunnerdJSONFields(t *testing.T) {
	cfg := &config.Config{
		Version: "v1",
		Admin:   config.Admin{Name: "ns/gw", LogLevel: "all:INFO", MetricsAddress: "$(POD_IP):9443", HealthAddress: ":8086"},
		Auth:    config.Auth{Type: "static", Realm: "r", Username: "u", PasswordFile: "/creds/password"},
		Listeners: []config.Listener{{Name: "ns/gw/udp", Protocol: "TURN-UDP", Address: "$(POD_IP)", Port: 3478,
			PublicAddress: "1.2.3.4", PublicPort: 3478, Routes: []string{"ns/route"}}},
		Clusters: []config.Cluster{{Name: "ns/route", Endpoints: []string{"10.0.0.1"}}},
	}
	doc, err := MarshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := StunnerdJSON(cfg, doc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := decodeStunnerV1(t, data)
	checkStunnerValid(t, s)
	for _, c := range []struct{ name, got, want string }{
		{"admin.metrics_endpoint", s.Admin.MetricsEndpoint, "http://$STUNNER_ADDR:9443/metrics"},
		{"admin.healthcheck_endpoint", *s.Admin.HealthCheckEndpoint, "http://:8086"},
		{"listeners[0].address", s.Listeners[0].Addr, "$STUNNER_ADDR"},
		{"listeners[0].public_address", s.Listeners[0].PublicAddr, "1.2.3.4"},
		{"clusters[0].type", s.Clusters[0].Type, "STATIC"},
		{"clusters[0].protocol", s.Clusters[0].Protocol, "udp"},
		{"auth.credentials.username", s.Auth.Credentials["username"], "u"},
		{"auth.credentials.password", s.Auth.Credentials["password"], ""},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(string(data), "/creds/password") {
		t.Error("the Tern document lost auth.passwordFile")
	}
}
