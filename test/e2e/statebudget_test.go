package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
)

// vmStatus returns a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func vmStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
		}
		return kb << 10
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// code508 reports whether err is a 508 Insufficient Capacity answer.
func code508(err error) bool {
	var er *turnclient.ErrorResponse
	return errors.As(err, &er) && er.Code == 508
}

// TestStateBudgetBoundsMemory is issue 22's item 5 against a built ternd: run as if in a
// container with a 128 MiB memory limit (--memory-limit-mib, as the cgroup would say), it
// derives a state budget of 64 MiB; clients with credentials from nine 127.x addresses fill it
// with channel bindings (numbers spread one per page), then allocations of 1,024 permissions
// each, until CreatePermission, Allocate and ChannelBind all get 508. ternd's peak RSS (VmHWM)
// stays under the 128 MiB limit, the state gauge under the budget, and a client that
// allocated before still relays, refreshes its allocation and its channel.
func TestStateBudgetBoundsMemory(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("the state budget is ternd's")
	}
	const limitMiB, budget = 128, 64 << 20
	echo := startEchoPeer(t, "127.0.0.1:0")
	cfg := defaultConfig(t)
	cfg.Admin.LogLevel = "info" // debug would log each refusal
	cfg.Clusters = []cluster{{Name: "local", Endpoints: []string{"127.0.0.0/8"}}}
	cfg.Relay.MaxPort = cfg.Relay.MinPort + 1999
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ternd.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(terndBinary(t), "-c", path, "-l", "info", "--memory-limit-mib", strconv.Itoa(limitMiB))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	l := cfg.Listeners[0]
	s := &server{cfg: cfg, addr: &net.UDPAddr{IP: net.ParseIP(l.Address), Port: l.Port},
		healthURL: "http://" + cfg.Admin.HealthAddress, metricsURL: "http://" + cfg.Admin.MetricsAddress}
	s.start(t, cmd)
	testenv.Eventually(t, readyTimeout, func() error {
		if s.exited() {
			t.Fatalf("ternd exited before it was ready: %v", s.waitErr)
		}
		return s.ready()
	})
	pid := s.cmd.Process.Pid
	server := netip.MustParseAddrPort(s.addr.String())
	creds := turnclient.Credentials{Username: testUser, Password: testPassword}
	var socks []*net.UDPConn
	defer func() {
		for _, c := range socks {
			c.Close()
		}
	}()
	newClient := func(src string) *turnclient.Client {
		t.Helper()
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(src+":0")))
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, c)
		return turnclient.New(c, server, creds)
	}

	// The legitimate client: an allocation and a channel to the echo peer.
	legit := newClient("127.0.0.1")
	if _, err := legit.Allocate(0); err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddrPort(echo.addr.String())
	if err := legit.ChannelBind(peer, 0x4000); err != nil {
		t.Fatal(err)
	}
	relayed := func() error {
		if _, err := socks[0].WriteToUDPAddrPort(turnclient.ChannelData(0x4000, []byte("still here")), server); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		_ = socks[0].SetReadDeadline(time.Now().Add(2 * time.Second))
		defer socks[0].SetReadDeadline(time.Time{})
		n, _, err := socks[0].ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if p, ok := turnclient.Payload(buf[:n]); !ok || string(p) != "still here" {
			return fmt.Errorf("relayed back %q", buf[:n])
		}
		return nil
	}
	if err := relayed(); err != nil {
		t.Fatalf("relay before the fill: %v", err)
	}
	if b, _ := s.metric(t, "tern_state_budget_bytes"); b != budget {
		t.Fatalf("tern_state_budget_bytes = %v, want %d (half of --memory-limit-mib %d)", b, budget, limitMiB)
	}
	baseline := vmStatus(t, pid, "VmRSS")

	// Channels: 5 allocations from 127.0.0.10, 100 channels each to peers on 100 IPs, one
	// channel number per page of the number table.
	for range 5 {
		c := newClient("127.0.0.10")
		if _, err := c.Allocate(0); err != nil {
			t.Fatal(err)
		}
		for k := range 100 {
			p := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 2, 0, byte(k)}), 9000)
			if err := c.ChannelBind(p, uint16(0x4000+64*k)); err != nil {
				t.Fatalf("ChannelBind %d: %v", k, err)
			}
		}
	}

	// Permissions: allocations of 1,024 permissions (2 requests of 512 peers) from
	// 127.0.1.1-8, up to the per-address quota of 200 each, until a CreatePermission gets
	// 508. Then smaller requests fill what is left, down to one peer.
	peers := make([]netip.AddrPort, 1024)
	for i := range peers {
		peers[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), 9000)
	}
	var last *turnclient.Client
	allocs, perms := 0, 0
fill:
	for a := 1; a <= 8; a++ {
		src := fmt.Sprintf("127.0.1.%d", a)
		for range 200 {
			c := newClient(src)
			if last != nil {
				c.SetAuth(last.Realm(), last.Nonce()) // saves the 401 round trip
			}
			if _, err := c.Allocate(0); err != nil {
				t.Fatalf("Allocate %d from %s: %v", allocs, src, err)
			}
			allocs++
			last = c
			for i := 0; i < len(peers); i += 512 {
				err := c.CreatePermissions(peers[i : i+512]...)
				if code508(err) {
					perms += i
					break fill
				}
				if err != nil {
					t.Fatalf("CreatePermission: %v", err)
				}
			}
			perms += len(peers)
		}
	}
	if last == nil || perms == allocs*len(peers) {
		t.Fatalf("no 508 after %d allocations with %d permissions", allocs, perms)
	}
	// Fill the rest with ever smaller requests on the last allocation (it has room for
	// permissions: it was refused part-way).
	next := perms % len(peers)
	for n := 256; n >= 1; n /= 2 {
		for next+n <= len(peers) {
			err := last.CreatePermissions(peers[next : next+n]...)
			if code508(err) {
				break
			}
			if err != nil {
				t.Fatalf("CreatePermission of %d: %v", n, err)
			}
			next += n
			perms += n
		}
	}
	t.Logf("filled with %d allocations, %d permissions, 500 channels", allocs, perms)

	// Less than a permission's worth is left: every request that makes state gets 508.
	if _, err := newClient("127.0.1.9").Allocate(0); !code508(err) {
		t.Errorf("Allocate at the budget: %v, want 508", err)
	}
	if err := last.ChannelBind(peers[0], 0x4001); !code508(err) {
		t.Errorf("ChannelBind at the budget: %v, want 508", err)
	}
	if next < len(peers) {
		if err := last.CreatePermissions(peers[next]); !code508(err) {
			t.Errorf("CreatePermission at the budget: %v, want 508", err)
		}
	}

	// The legitimate client relays, and refreshes what it holds.
	if err := relayed(); err != nil {
		t.Errorf("relay at the budget: %v", err)
	}
	if err := legit.Refresh(600); err != nil {
		t.Errorf("Refresh at the budget: %v", err)
	}
	if err := legit.ChannelBind(peer, 0x4000); err != nil {
		t.Errorf("ChannelBind refresh at the budget: %v", err)
	}

	used, _ := s.metric(t, "tern_state_bytes")
	fams := s.scrapeFamilies(t)
	refused := series(fams["tern_refused_requests_total"])
	for _, r := range []string{"state_budget_allocate", "state_budget_permission", "state_budget_channel"} {
		if refused["reason="+r] == 0 {
			t.Errorf("tern_refused_requests_total{reason=%q} = 0", r)
		}
	}
	rss, hwm := vmStatus(t, pid, "VmRSS"), vmStatus(t, pid, "VmHWM")
	t.Logf("state %d bytes of a %d budget; RSS %d MiB before the fill, %d after, peak %d MiB; limit %d MiB",
		int64(used), budget, baseline>>20, rss>>20, hwm>>20, limitMiB)
	if used > budget || used < budget-1024 {
		t.Errorf("tern_state_bytes = %v, want within 1 KiB below the budget %d", used, budget)
	}
	if hwm >= limitMiB<<20 {
		t.Errorf("ternd's peak RSS %d MiB passed the %d MiB limit", hwm>>20, limitMiB)
	}
}
