package authservice

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		query   string
		ice     bool
		want    request
		wantErr string // the error's text; "" for none
	}{
		// What adopters send (STUNner's README and seed manifests).
		{query: "service=turn&username=my-user&ttl=3600", want: request{user: "my-user", ttl: 3600}},
		{query: "service=turn&username=my-user&ttl=3600", ice: true, want: request{user: "my-user", ttl: 3600, policy: "all"}},
		{query: "service=turn&namespace=stunner&gateway=udp-gateway&listener=udp-listener&iceTransportPolicy=relay", ice: true,
			want: request{namespace: "stunner", gateway: "udp-gateway", listener: "udp-listener", policy: "relay"}},
		{query: "service=turn&username=&ttl=&namespace=&gateway=&listener=", ice: true, want: request{policy: "all"}},
		{query: "icetransportpolicy=public", ice: true, want: request{policy: "public"}},
		{query: "service=TURN&key=ignored&unknown=1&public-addr=198.51.100.7", want: request{publicAddr: "198.51.100.7"}},
		{query: "service=turn&public-addr=turn.example.com", want: request{publicAddr: "turn.example.com"}},
		{query: "service=turn&public-addr=2001:db8::1", want: request{publicAddr: "2001:db8::1"}},
		{query: "service=turn&username=alice:bob%40example.com&ttl=315360000", want: request{user: "alice:bob@example.com", ttl: 315360000}},
		// service: required on /, optional on /ice, turn only.
		{query: "", ice: true, want: request{policy: "all"}},
		{query: "", wantErr: `service: required, want "turn"`},
		{query: "username=alice", wantErr: `service: required, want "turn"`},
		{query: "service=stun", ice: true, wantErr: `service: want "turn", got "stun"`},
		// ttl.
		{query: "service=turn&ttl=abc", wantErr: `ttl: want a whole number of seconds from 1, got "abc"`},
		{query: "service=turn&ttl=0", wantErr: "ttl: want a whole number"},
		{query: "service=turn&ttl=-5", wantErr: "ttl: want a whole number"},
		{query: "service=turn&ttl=%2B5", wantErr: "ttl: want a whole number"},
		{query: "service=turn&ttl=1.5", wantErr: "ttl: want a whole number"},
		// Any ttl from 1 is taken (the handler caps it), one past int64 too.
		{query: "service=turn&ttl=315360001", want: request{ttl: 315360001}},
		{query: "service=turn&ttl=99999999999999999999", want: request{ttl: math.MaxInt64}},
		{query: "service=turn&ttl=-99999999999999999999", wantErr: "ttl: want a whole number"},
		{query: "service=turn&ttl=1&ttl=2", wantErr: "ttl: given 2 times, want at most one"},
		// username.
		{query: "service=turn&username=" + strings.Repeat("u", 257), wantErr: "username: 257 bytes, want at most 256"},
		{query: "service=turn&username=a%0Ab", wantErr: "username: want UTF-8 text without control characters"},
		{query: "service=turn&username=%FF", wantErr: "username: want UTF-8 text"},
		// iceTransportPolicy.
		{query: "iceTransportPolicy=none", ice: true, wantErr: `iceTransportPolicy: want "all", "public" or "relay", got "none"`},
		{query: "iceTransportPolicy=all&icetransportpolicy=relay", ice: true, wantErr: "iceTransportPolicy: given 2 times"},
		// Selection.
		{query: "service=turn&gateway=g", wantErr: "gateway: needs namespace"},
		{query: "service=turn&namespace=n&listener=l", wantErr: "listener: needs gateway and namespace"},
		{query: "service=turn&namespace=" + strings.Repeat("n", 254), wantErr: "namespace: 254 bytes, want at most 253"},
		{query: "service=turn&public-addr=1.2.3.4:3478", wantErr: `public-addr: want an IP address or a DNS name, got "1.2.3.4:3478"`},
		{query: "service=turn&public-addr=fe80::1%25eth0", wantErr: "public-addr: want an IP address or a DNS name"},
		{query: "service=turn&public-addr=-bad.example", wantErr: "public-addr: want an IP address or a DNS name"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatalf("%q: %v", tc.query, err)
		}
		got, err := parseRequest(q, tc.ice)
		if tc.wantErr != "" {
			var pe *paramError
			if err == nil || !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%q (ice %t): error %v, want a paramError starting %q", tc.query, tc.ice, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q (ice %t) = %+v, %v; want %+v", tc.query, tc.ice, got, err, tc.want)
		}
	}
}

// requestSeeds are the seed corpus of FuzzParseRequest: a valid query of each endpoint, every
// parameter, and each kind of refusal.
func requestSeeds() []struct {
	query string
	ice   bool
} {
	return []struct {
		query string
		ice   bool
	}{
		{"service=turn&username=my-user&ttl=3600", false},
		{"service=turn&namespace=stunner&gateway=udp-gateway&listener=udp-listener&iceTransportPolicy=relay", true},
		{"service=turn&public-addr=2001:db8::1&key=k", true},
		{"service=turn&ttl=1&ttl=2", false},
		{"service=turn&gateway=g", true},
		{"username=a%0Ab&ttl=-1", true},
		{"%zz", false},
		{"service=turn&ttl=99999999999999999999", false}, // past int64: capped, not refused
	}
}

// FuzzParseRequest parses arbitrary query strings: parseRequest never panics, refuses only
// with a paramError, and what it accepts is in the domain the handler relies on.
func FuzzParseRequest(f *testing.F) {
	for _, s := range requestSeeds() {
		f.Add(s.query, s.ice)
	}
	f.Fuzz(func(t *testing.T, query string, ice bool) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return // net/http answers such a query before the handler sees it
		}
		r, err := parseRequest(q, ice)
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) {
				t.Fatalf("%q: error %v is not a paramError", query, err)
			}
			return
		}
		if r.ttl < 0 || (r.ttl == 0 && q.Get("ttl") != "") {
			t.Fatalf("%q: ttl %d out of range", query, r.ttl)
		}
		if ice != (r.policy != "") || (ice && r.policy != "all" && r.policy != "public" && r.policy != "relay") {
			t.Fatalf("%q (ice %t): policy %q", query, ice, r.policy)
		}
		if (r.gateway != "" && r.namespace == "") || (r.listener != "" && r.gateway == "") {
			t.Fatalf("%q: selection %+v", query, r)
		}
		if len(r.user) > maxUser || !utf8.ValidString(r.user) {
			t.Fatalf("%q: user %q", query, r.user)
		}
		if r.publicAddr != "" && strings.ContainsAny(r.publicAddr, "?/@[] %") {
			t.Fatalf("%q: public-addr %q would break a URI", query, r.publicAddr)
		}
	})
}

// TestFuzzCorpus checks that testdata/fuzz/FuzzParseRequest holds exactly requestSeeds, so
// `go test -fuzz` starts from each kind of query. TERN_WRITE_CORPUS=1 rewrites the files.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseRequest")
	want := map[string]string{}
	for i, s := range requestSeeds() {
		want[fmt.Sprintf("seed%02d", i)] = fmt.Sprintf("go test fuzz v1\nstring(%q)\nbool(%t)\n", s.query, s.ice)
	}
	if os.Getenv("TERN_WRITE_CORPUS") == "1" {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range want {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok && strings.HasPrefix(e.Name(), "seed") {
			t.Errorf("%s/%s is not a seed any more; rerun with TERN_WRITE_CORPUS=1", dir, e.Name())
		}
	}
	for name, body := range want {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != body {
			t.Errorf("%s/%s is stale or missing (%v); rerun with TERN_WRITE_CORPUS=1", dir, name, err)
		}
	}
}
