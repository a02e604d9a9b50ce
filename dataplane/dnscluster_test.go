package dataplane

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/dnstest"
	"github.com/tern-gw/tern/internal/testenv"
)

// permit sends a signed CreatePermission for peer over c (which has
// authenticated already) and returns the error code, 0 on success.
func permit(c *rawClient, peer netip.Addr) int {
	c.t.Helper()
	m := stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodCreatePermission, stun.ClassRequest),
		xorPeer{stun.XORMappedAddress{IP: peer.AsSlice(), Port: 9}},
		stun.NewUsername(c.user), stun.NewRealm(c.realm), stun.NewNonce(c.nonce),
		stun.NewLongTermIntegrity(c.user, c.realm, c.pass), stun.Fingerprint)
	if _, err := c.conn.Write(m.Raw); err != nil {
		c.t.Fatal(err)
	}
	resp := &stun.Message{Raw: append([]byte(nil), c.read()...)}
	if err := resp.Decode(); err != nil {
		c.t.Fatal(err)
	}
	if resp.Type.Class == stun.ClassSuccessResponse {
		return 0
	}
	var code stun.ErrorCodeAttribute
	_ = code.GetFrom(resp)
	return int(code.Code)
}

// TestStrictDNSCluster runs a dataplane whose listener routes to a
// STRICT_DNS cluster answered by a DNS server on 127.0.0.1: a permission to
// the name's address is granted, to another refused (403); when the answer
// changes, the new address is allowed and the old refused within a few
// re-resolution periods, while an allocation made before keeps relaying.
func TestStrictDNSCluster(t *testing.T) {
	dns := dnstest.Start(t)
	old, next := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	dns.Set("media.example.test", old)
	cfg := testConfig(t, 29720, 29729)
	cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: "media", Type: config.ClusterStrictDNS, Endpoints: []string{"media.example.test"}})
	cfg.Listeners[0].Routes = []string{"local", "media"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	startOpts(t, cfg, Options{UDPThreads: 1, RelayThreads: 1, DNS: dns.Resolver(), DNSInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	peer := startEchoPeer(t, "127.0.0.1")
	c := dialRaw(t, cfg.Listeners[0], "user", "pass")
	const ch = 0x4001
	c.allocate(ch, peer.addr().AddrPort())
	if code := permit(c, old); code != 0 {
		t.Fatalf("permission to %v (the name's address): error %d", old, code)
	}
	if code := permit(c, next); code != int(stun.CodeForbidden) {
		t.Fatalf("permission to %v (not the name's address): %d, want 403", next, code)
	}

	dns.Set("media.example.test", next)
	testenv.Eventually(t, 3*time.Second, func() error {
		if code := permit(c, next); code != 0 {
			return fmt.Errorf("permission to %v after the DNS change: error %d", next, code)
		}
		return nil
	})
	if code := permit(c, old); code != int(stun.CodeForbidden) {
		t.Errorf("permission to %v after it left the answer: %d, want 403", old, code)
	}
	payload := []byte("still relaying after the change.")
	if _, err := c.conn.Write(channelData(ch, payload, false)); err != nil {
		t.Fatal(err)
	}
	if m := c.read(); string(m[4:4+len(payload)]) != string(payload) {
		t.Errorf("echo after the DNS change: % x", m)
	}
}
