package main

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFileStunnerd loads stunnerd's format through ternd's loader:
// inline certificates become files in a private directory, removed by
// close, and what is ignored is logged once the logger exists.
func TestConfigFileStunnerd(t *testing.T) {
	cert := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nc\n"))
	key := base64.StdEncoding.EncodeToString([]byte("-----BEGIN PRIVATE KEY-----\nk\n"))
	doc := `version: v1
admin: {name: ns/gw, healthcheck_endpoint: "", offload_engine: Auto}
auth: {credentials: {username: u, password: p}}
listeners:
- {name: ns/gw/tls, protocol: TURN-TLS, address: $STUNNER_ADDR, port: 5349, cert: ` + cert + `, key: ` + key + `}
`
	path := filepath.Join(t.TempDir(), "stunnerd.conf")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cf := &configFile{getenv: func(k string) string { return map[string]string{"STUNNER_ADDR": "10.0.0.9"}[k] }}
	c, err := cf.load(path)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listeners[0]
	if l.Address != "10.0.0.9" || c.Relay.Address != "10.0.0.9" || filepath.Dir(l.Cert) != cf.tlsDir || strings.Contains(filepath.Base(l.Cert), "/") {
		t.Errorf("listener %+v, relay %+v, tls dir %q", l, c.Relay, cf.tlsDir)
	}
	if b, err := os.ReadFile(l.Key); err != nil || !bytes.HasPrefix(b, []byte("-----BEGIN PRIVATE KEY")) {
		t.Errorf("key file: %q, %v", b, err)
	}
	var buf bytes.Buffer
	cf.setLogger(slog.New(slog.NewTextHandler(&buf, nil)), path)
	if !strings.Contains(buf.String(), "offload_engine") {
		t.Errorf("notes not logged: %q", buf.String())
	}
	cf.close()
	if _, err := os.Stat(cf.tlsDir); !os.IsNotExist(err) {
		t.Errorf("tls dir left behind: %v", err)
	}
}
