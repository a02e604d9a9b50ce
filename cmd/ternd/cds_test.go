package main

import (
	"io"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/operator/cds"
	"github.com/tern-gw/tern/operator/render"
)

// TestCDSDecode reads what a config discovery service sends: tern-operator's
// configs (Tern's document inside), STUNner's operator's (stunnerd's
// format), STUNner's zero config (a deletion), and configs that must be
// rejected.
func TestCDSDecode(t *testing.T) {
	env := map[string]string{"POD_IP": "10.0.0.7", "STUNNER_ADDR": "10.0.0.8"}
	s := &cdsSource{getenv: func(k string) string { return env[k] }, cf: &configFile{}}
	s.log.Store(newLogger("text", &strings.Builder{}, nil))

	cfg := &config.Config{Version: "v1", Admin: config.Admin{Name: "ns/gw"},
		Auth:      config.Auth{Type: "static", Realm: "r", Username: "u", PasswordFile: "/creds/password"},
		Listeners: []config.Listener{{Name: "ns/gw/udp", Protocol: "TURN-UDP", Address: "$(POD_IP)", Port: 3478}}}
	doc, err := render.MarshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served, err := render.StunnerdJSON(cfg, doc)
	if err != nil {
		t.Fatal(err)
	}
	got, deleted, err := s.decode(served)
	if err != nil || deleted {
		t.Fatalf("tern-operator's config: %v, deleted %v", err, deleted)
	}
	if got.Listeners[0].Address != "10.0.0.7" || got.Auth.PasswordFile != "/creds/password" {
		t.Errorf("tern-operator's config read as %+v", got)
	}

	stunnerd := `{"version":"v1","admin":{"name":"ns/gw"},"auth":{"type":"static","credentials":{"username":"u","password":"p"}},` +
		`"listeners":[{"name":"ns/gw/udp","protocol":"TURN-UDP","address":"$STUNNER_ADDR","port":3478}]}`
	got, deleted, err = s.decode([]byte(stunnerd))
	if err != nil || deleted || got.Listeners[0].Address != "10.0.0.8" || got.Auth.Password != "p" {
		t.Errorf("STUNner's config: %+v, deleted %v, %v", got, deleted, err)
	}

	if _, deleted, err := s.decode(cds.ZeroConfig("ns/gw")); err != nil || !deleted {
		t.Errorf("zero config: deleted %v, %v", deleted, err)
	}

	for name, bad := range map[string]string{
		"not JSON":           `{"version"`,
		"bad Tern document":  `{"version":"v1","tern":{"version":"v1","listeners":[{"name":"x","protocol":"TURN-UDP","port":70000}]}}`,
		"bad stunnerd field": `{"version":"v1","listeners":[{"name":"x","protocol":"TURN-UDP","port":"high"}]}`,
	} {
		if _, _, err := s.decode([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzCDSDecode feeds any message a config discovery service could send
// to ternd's reader of them: no panic, and a config read is one that
// passed the config package's validation (a deletion carries none).
func FuzzCDSDecode(f *testing.F) {
	f.Add([]byte(`{"version":"v1","admin":{"name":"ns/gw"},"auth":{"type":"static","realm":"r","credentials":{"username":"u","password":""}},"listeners":[{"name":"ns/gw/udp","protocol":"TURN-UDP","address":"$STUNNER_ADDR","port":3478}],"tern":{"version":"v1","admin":{"name":"ns/gw"},"auth":{"type":"static","realm":"r","username":"u","passwordFile":"/p"},"listeners":[{"name":"ns/gw/udp","protocol":"TURN-UDP","address":"$(POD_IP)","port":3478}],"relay":{},"limits":{}}}`))
	f.Add(cds.ZeroConfig("ns/gw"))
	f.Add([]byte(`{"version":"v1","auth":{"credentials":{"username":"u","password":"p"}},"listeners":[{"name":"l","port":3478}]}`))
	f.Add([]byte(`{"tern":null,"listeners":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		s := &cdsSource{getenv: func(string) string { return "" }, cf: &configFile{}}
		s.log.Store(newLogger("text", io.Discard, nil))
		defer s.cf.close()
		cfg, deleted, err := s.decode(msg)
		switch {
		case err != nil && (cfg != nil || deleted):
			t.Fatalf("error %v with a config or a deletion", err)
		case deleted && cfg != nil:
			t.Fatal("a deletion with a config")
		case err == nil && !deleted && cfg == nil:
			t.Fatal("no config, no deletion, no error")
		}
	})
}

// TestCDSRejectCounts: a config that does not load is counted in the
// server's metrics, also one refused before the server ran, and not applied.
func TestCDSRejectCounts(t *testing.T) {
	s := &cdsSource{getenv: func(string) string { return "" }, cf: &configFile{}, first: make(chan struct{})}
	s.log.Store(newLogger("text", io.Discard, nil))
	s.handle([]byte(`{"version"`)) // before the server runs
	rejected, applied := 0, 0
	s.setApply(func(*config.Config) error { applied++; return nil }, func() { rejected++ }, newLogger("text", io.Discard, nil))
	s.handle([]byte(`{"version":"v1","tern":{"version":"v1","listeners":[{"name":"x","protocol":"TURN-UDP","port":70000}]}}`))
	if rejected != 2 || applied != 0 {
		t.Errorf("rejected %d, applied %d; want 2 and 0", rejected, applied)
	}
}
