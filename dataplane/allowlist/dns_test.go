package allowlist

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/dnstest"
	"github.com/tern-gw/tern/internal/testenv"
)

var (
	media1 = netip.MustParseAddr("192.0.2.10")
	media2 = netip.MustParseAddr("192.0.2.11")
	media6 = netip.MustParseAddr("2001:db8::10")
)

// TestResolverFollowsDNS resolves a STRICT_DNS cluster through a DNS
// server on 127.0.0.1, changes the answer, and checks that the Resolver
// reports the change and that an allowlist rebuilt from it follows: the
// new address allowed, the old one refused.
func TestResolverFollowsDNS(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set("media.example.test", media1, media6)
	var changes atomic.Int32
	r := NewResolver(dns.Resolver(), 50*time.Millisecond, nil, func() { changes.Add(1) })
	defer r.Close()
	clusters := []config.Cluster{{Name: "media", Type: config.ClusterStrictDNS, Endpoints: []string{"media.example.test"}, MinPort: 5000, MaxPort: 5010}}
	r.SetClusters(clusters)
	if got := r.Lookup("media.example.test"); !slices.Equal(got, []netip.Addr{media1, media6}) {
		t.Fatalf("first answer %v, want [%v %v] at once", got, media1, media6)
	}
	allowed := func(peer string) bool {
		l, err := Build([]string{"media"}, clusters, Self{}, r.Lookup, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l.Allowed(netip.MustParseAddrPort(peer))
	}
	if !allowed("192.0.2.10:5000") || !allowed("[2001:db8::10]:5010") || allowed("192.0.2.10:6000") || allowed("192.0.2.11:5000") {
		t.Fatal("allowlist does not match the first answer and the port range")
	}

	dns.Set("media.example.test", media2)
	testenv.Eventually(t, 2*time.Second, func() error {
		if changes.Load() == 0 {
			return fmt.Errorf("no change reported; answer %v", r.Lookup("media.example.test"))
		}
		return nil
	})
	if !allowed("192.0.2.11:5000") || allowed("192.0.2.10:5000") {
		t.Fatalf("allowlist after the change: answer %v", r.Lookup("media.example.test"))
	}

	// Unchanged answers report nothing.
	n := changes.Load()
	q := dns.Queries()
	testenv.Eventually(t, 2*time.Second, func() error {
		if dns.Queries() < q+4 {
			return fmt.Errorf("%d queries since, want a few rounds", dns.Queries()-q)
		}
		return nil
	})
	if changes.Load() != n {
		t.Errorf("%d changes reported for an unchanged answer", changes.Load()-n)
	}

	// NXDOMAIN empties the answer.
	dns.Set("media.example.test")
	testenv.Eventually(t, 2*time.Second, func() error {
		if got := r.Lookup("media.example.test"); len(got) != 0 {
			return fmt.Errorf("answer %v after NXDOMAIN", got)
		}
		return nil
	})

	// A cluster removed: its name is forgotten and no longer asked.
	r.SetClusters(nil)
	if got := r.Lookup("media.example.test"); got != nil {
		t.Errorf("forgotten name still answers %v", got)
	}
}

// TestResolverKeepsAnswerOnFailure: a DNS server that stops answering
// leaves the last answer in place.
func TestResolverKeepsAnswerOnFailure(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set("media.example.test", media1)
	res := dns.Resolver()
	r := NewResolver(res, 50*time.Millisecond, nil, nil)
	defer r.Close()
	r.SetClusters([]config.Cluster{{Name: "m", Type: "strict_dns", Endpoints: []string{"media.example.test"}}})
	dns.Close()
	q := time.Now()
	for time.Since(q) < 300*time.Millisecond {
		if got := r.Lookup("media.example.test"); !slices.Equal(got, []netip.Addr{media1}) {
			t.Fatalf("answer %v while DNS is down, want the last one [%v]", got, media1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDNSAnswersOpenNoProtectedRange: a name resolving to loopback or the
// metadata address does not open them, while a STATIC cluster naming them
// does.
func TestDNSAnswersOpenNoProtectedRange(t *testing.T) {
	lookup := func(string) []netip.Addr {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254"), media1}
	}
	clusters := []config.Cluster{{Name: "dns", Type: config.ClusterStrictDNS, Endpoints: []string{"evil.example.test"}}}
	l, err := Build([]string{"dns"}, clusters, Self{}, lookup, nil)
	if err != nil {
		t.Fatal(err)
	}
	for peer, want := range map[string]bool{"127.0.0.1:9": false, "169.254.169.254:80": false, "192.0.2.10:9": true} {
		if got := l.Allowed(netip.MustParseAddrPort(peer)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", peer, got, want)
		}
	}
	if l, err := New([]string{"dns"}, clusters, Self{}); err != nil || l.Allowed(netip.MustParseAddrPort("192.0.2.10:9")) {
		t.Errorf("New resolves nothing: %v, %v", l, err)
	}
}
