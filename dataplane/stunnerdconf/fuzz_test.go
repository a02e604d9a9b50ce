package stunnerdconf

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// fuzzEnv is the environment the fuzz targets parse in: a pod with an IPv4
// pod IP and an IPv6 node IP, so both placeholders can expand, on node-a.
func fuzzEnv(k string) string {
	return map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "2001:db8::7", "NODE_NAME": "node-a"}[k]
}

// FuzzParseStunnerd checks that reading stunnerd's format never panics,
// that what it accepts is valid Tern config that Parse reads back the same,
// and that a certificate reaches WriteTLS only decoded. Seeds are the files
// in testdata/stunnerd and testdata/fuzz/FuzzParseStunnerd.
func FuzzParseStunnerd(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "stunnerd", "*"))
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = Detect(data)
		c, _, err := Parse(data, Options{Getenv: fuzzEnv, WriteTLS: func(name string, cert, key []byte) (string, string, error) {
			return "/tls/cert.pem", "/tls/key.pem", nil
		}})
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := config.Parse(b, nil)
		if err != nil {
			t.Fatalf("config.Parse rejects what Parse made, %s: %v", b, err)
		}
		if b2, _ := json.Marshal(c2); !bytes.Equal(b, b2) {
			t.Fatalf("Parse changed the converted config:\n%s\n%s", b, b2)
		}
	})
}

// FuzzParseTURNURI checks that stunnerd's "turn://user:pass@address:port?transport=udp"
// argument never panics the parser, and that what it accepts is one valid listener with the
// URI's credentials that Parse reads back the same. Seeds: testdata/fuzz/FuzzParseTURNURI.
func FuzzParseTURNURI(f *testing.F) {
	f.Add("turn://user1:passwd1@127.0.0.1:3478?transport=udp")
	f.Fuzz(func(t *testing.T, uri string) {
		c, err := ParseTURNURI(uri, fuzzEnv)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseTURNURI accepted a config that Validate rejects: %v", err)
		}
		if len(c.Listeners) != 1 || c.Listeners[0].Name != "default-listener" {
			t.Fatalf("want one listener named default-listener, got %+v", c.Listeners)
		}
		u, err := url.Parse(uri)
		if err != nil || u.User == nil {
			t.Fatalf("accepted, but url.Parse gives %v, %v", u, err)
		}
		a := c.Auth
		if pw, ok := u.User.Password(); ok {
			if a.Type != config.AuthStatic || a.Username != u.User.Username() || a.Password != pw {
				t.Fatalf("auth %+v, want static %q/%q", a, u.User.Username(), pw)
			}
		} else if a.Type != config.AuthEphemeral || a.SharedSecret != u.User.Username() {
			t.Fatalf("auth %+v, want ephemeral with secret %q", a, u.User.Username())
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := config.Parse(b, nil)
		if err != nil {
			t.Fatalf("Parse rejects what ParseTURNURI made, %s: %v", b, err)
		}
		if b2, _ := json.Marshal(c2); !bytes.Equal(b, b2) {
			t.Fatalf("Parse changed the converted config:\n%s\n%s", b, b2)
		}
	})
}
