package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzEnv is the environment FuzzParse parses in: a pod with an IPv4 pod
// IP and an IPv6 node IP, so both placeholders can expand and both address
// families reach Validate, on node-a, so relay.nodePublicAddresses applies.
func fuzzEnv(k string) string {
	return map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "2001:db8::7", "NODE_NAME": "node-a"}[k]
}

// FuzzParse checks that Parse never panics, that what it accepts is valid,
// and that an accepted config survives a JSON round trip unchanged (so what
// the operator marshals, ternd parses back the same). The round trip parses
// without an environment: an accepted config has no placeholders left.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimalYAML))
	f.Add([]byte(minimalJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, fuzzEnv)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		b1, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(b1, nil)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", b1, err)
		}
		b2, err := json.Marshal(c2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("round trip changed the config:\n%s\n%s", b1, b2)
		}
	})
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
		_ = IsStunnerd(data)
		c, _, err := ParseStunnerd(data, StunnerdOptions{Getenv: fuzzEnv, WriteTLS: func(name string, cert, key []byte) (string, string, error) {
			return "/tls/cert.pem", "/tls/key.pem", nil
		}})
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseStunnerd accepted a config that Validate rejects: %v", err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(b, nil)
		if err != nil {
			t.Fatalf("Parse rejects what ParseStunnerd made, %s: %v", b, err)
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
			if a.Type != AuthStatic || a.Username != u.User.Username() || a.Password != pw {
				t.Fatalf("auth %+v, want static %q/%q", a, u.User.Username(), pw)
			}
		} else if a.Type != AuthEphemeral || a.SharedSecret != u.User.Username() {
			t.Fatalf("auth %+v, want ephemeral with secret %q", a, u.User.Username())
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(b, nil)
		if err != nil {
			t.Fatalf("Parse rejects what ParseTURNURI made, %s: %v", b, err)
		}
		if b2, _ := json.Marshal(c2); !bytes.Equal(b, b2) {
			t.Fatalf("Parse changed the converted config:\n%s\n%s", b, b2)
		}
	})
}

// FuzzParseLogLevel checks STUNner's log-level syntax ("all:INFO,turn:DEBUG", or a bare
// level): ParseLogLevel never panics, returns one of the six levels it knows, ignores the case
// of ASCII letters, and agrees with UnknownLogScopes, whose answer is the scopes of s that are
// not LogScopes, once each. Seeds: testdata/fuzz/FuzzParseLogLevel.
func FuzzParseLogLevel(f *testing.F) {
	f.Add("all:INFO,turn:DEBUG")
	f.Fuzz(func(t *testing.T, s string) {
		unknown := UnknownLogScopes(s)
		seen := map[string]bool{}
		for _, sc := range unknown {
			if sc == "" || seen[sc] || knownScope(sc) || !strings.Contains(s, sc+":") {
				t.Fatalf("UnknownLogScopes(%q) = %q: %q is empty, repeated, known or not a scope of s", s, unknown, sc)
			}
			seen[sc] = true
		}
		l, err := ParseLogLevel(s)
		if err != nil {
			return
		}
		switch l {
		case LevelTrace, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, LevelDisable:
		default:
			t.Fatalf("ParseLogLevel(%q) = %v, not a level it names", s, l)
		}
		up := strings.Map(func(r rune) rune {
			if 'a' <= r && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}, s)
		if l2, err := ParseLogLevel(up); err != nil || l2 != l {
			t.Fatalf("ParseLogLevel(%q) = %v, %v; but %q gave %v", up, l2, err, s, l)
		}
	})
}
