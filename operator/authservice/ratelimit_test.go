package authservice

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// clientFrom is an HTTP client whose connections come from the local address ip (127.0.0.0/8
// all reaches the loopback interface), without keep-alive, so each request is a connection of
// its own.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// do sends GET url with the headers given as name, value pairs and returns the status,
// headers and body.
func do(t *testing.T, c *http.Client, url string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// waitServed waits until the cache answers path with 200 (the first requests may find it
// empty), using c, and returns how many requests that took.
func waitServed(t *testing.T, c *http.Client, url string, header ...string) int {
	t.Helper()
	for n := 1; ; n++ {
		code, _, body := do(t, c, url, header...)
		switch {
		case code == 200:
			return n
		case n >= 300:
			t.Fatalf("%s: %d %s", url, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRateLimit: over real HTTP, one client address gets 429 with Retry-After once its burst
// is spent, while another address is still served; the bucket refills at the rate. The clock
// is the test's, so no outcome depends on timing.
func TestRateLimit(t *testing.T) {
	setupCluster(t)
	clock := &manualClock{now: time.Unix(1700000000, 0)}
	base := startService(t, Options{Now: clock.Now, RateLimit: 0.5, RateBurst: 3})
	path := base + "/ice?namespace=auth-e&gateway=gw&username=alice"
	one, two := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")

	// Wait for the cache with the second address, so that the first address's bucket is
	// untouched.
	for n := 0; ; n++ {
		code, _, body := do(t, two, path)
		if code == 200 {
			break
		}
		if n >= 300 {
			t.Fatalf("waiting for the cache: %d %s", code, body)
		}
		clock.Advance(2 * time.Second)
		time.Sleep(100 * time.Millisecond)
	}
	clock.Advance(10 * time.Second) // the second address's bucket full again

	for i := range 3 {
		if code, _, body := do(t, one, path); code != 200 {
			t.Fatalf("request %d of the burst: %d %s", i+1, code, body)
		}
	}
	code, hdr, body := do(t, one, path)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "2" || !strings.Contains(body, "too many requests") {
		t.Fatalf("past the burst: %d, Retry-After %q, %q; want 429, 2", code, hdr.Get("Retry-After"), body)
	}
	// Another address has its own bucket: the full burst of 3.
	for i := range 3 {
		if code, _, body := do(t, two, path); code != 200 {
			t.Fatalf("another address, request %d: %d %s", i+1, code, body)
		}
	}
	if code, _, _ := do(t, two, path); code != http.StatusTooManyRequests {
		t.Fatalf("another address past its burst: %d, want 429", code)
	}
	// One token every 2 s.
	clock.Advance(2 * time.Second)
	if code, _, body := do(t, one, path); code != 200 {
		t.Fatalf("after the refill: %d %s", code, body)
	}
	if code, _, _ := do(t, one, path); code != http.StatusTooManyRequests {
		t.Fatalf("after the refill's token: %d, want 429", code)
	}
}

// TestLimiterTable: the table is fixed, and a flood of addresses that each come once evicts
// its own kind, not the drained bucket of a busy address; IPv6 counts by /64.
func TestLimiterTable(t *testing.T) {
	now := time.Unix(1700000000, 0)
	l := newLimiter(1, 2)
	busy := netip.MustParseAddr("192.0.2.1")
	for range 2 {
		if wait := l.allow(busy, now); wait != 0 {
			t.Fatalf("burst: wait %v", wait)
		}
	}
	if wait := l.allow(busy, now); wait != time.Second {
		t.Fatalf("past the burst: wait %v, want 1s", wait)
	}
	for i := range 100000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if wait := l.allow(ip, now); wait != 0 {
			t.Fatalf("a new address %v: wait %v", ip, wait)
		}
	}
	if wait := l.allow(busy, now); wait == 0 {
		t.Fatal("the busy address was evicted by one-off addresses")
	}
	v6 := netip.MustParseAddr("2001:db8:1:2::1")
	for range 2 {
		l.allow(v6, now)
	}
	if wait := l.allow(netip.MustParseAddr("2001:db8:1:2:ffff::9"), now); wait == 0 {
		t.Fatal("another address of the same /64 has a bucket of its own")
	}
	if wait := l.allow(netip.MustParseAddr("::ffff:192.0.2.1"), now); wait == 0 {
		t.Fatal("the IPv4-mapped form of an address has a bucket of its own")
	}
}

// TestBearerToken: with a token file, requests without the token or with a wrong one get 401
// and WWW-Authenticate, the right one is served, a rotated file takes effect at once, and an
// empty file refuses everything with 500.
func TestBearerToken(t *testing.T) {
	setupCluster(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.LockedBuffer
	base := startService(t, Options{TokenFile: file, Log: newDebugLog(&logs)})
	path := base + "/?service=turn&namespace=auth-e&gateway=gw&username=alice"
	c := clientFrom("127.0.0.1")
	waitServed(t, c, path, "Authorization", "Bearer first-token")

	for _, tc := range []struct {
		header []string
		code   int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer wrong-token"}, 401},
		{[]string{"Authorization", "Basic Zmlyc3QtdG9rZW4="}, 401},
		{[]string{"Authorization", "first-token"}, 401},
		{[]string{"Authorization", "Bearer first-token"}, 200},
		{[]string{"Authorization", "bearer first-token"}, 200}, // the scheme is case-insensitive (RFC 9110 §11.1)
	} {
		code, hdr, body := do(t, c, path, tc.header...)
		if code != tc.code {
			t.Errorf("%q: %d %s, want %d", tc.header, code, body, tc.code)
		}
		if code == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("%q: WWW-Authenticate %q", tc.header, hdr.Get("WWW-Authenticate"))
		}
	}

	if err := os.WriteFile(file, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := do(t, c, path, "Authorization", "Bearer first-token"); code != 401 {
		t.Errorf("the old token after rotation: %d, want 401", code)
	}
	if code, _, body := do(t, c, path, "Authorization", "Bearer second-token"); code != 200 {
		t.Errorf("the new token: %d %s", code, body)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := do(t, c, path, "Authorization", "Bearer "); code != 500 {
		t.Errorf("an empty token file: %d, want 500", code)
	}
	if out := logs.String(); strings.Contains(out, "first-token") || strings.Contains(out, "second-token") {
		t.Errorf("the log holds a token:\n%s", out)
	}
}

// newDebugLog logs every level as JSON to w.
func newDebugLog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
