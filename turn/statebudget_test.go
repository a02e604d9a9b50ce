package turn

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

// peerN is the n-th peer of 198.51.100.0/24 (n < 256), which testListener
// allows, on port 5000.
func peerN(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(n)}), 5000)
}

func peerAttrs(from, to int) []stun.Setter {
	var s []stun.Setter
	for i := from; i < to; i++ {
		s = append(s, peerAttr(peerN(i)))
	}
	return s
}

// held returns the permissions and channels a holds.
func held(a *Allocation) (perms, chans int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.perms.n, a.byPeer.n
}

// TestStateBudget: past Settings.StateBudget, Allocate, CreatePermission
// (all its peers or none) and ChannelBind get 508 and install nothing,
// refreshes of what exists still succeed, and the bytes come back when
// the state expires or is deleted (issue 22, item 5).
func TestStateBudget(t *testing.T) {
	firstBind := int64(ChannelCost + PermissionCost + chanDirCost + chanPageCost)
	for _, tc := range []struct {
		name   string
		budget int64
		run    func(t *testing.T, f *fixture, c *client)
	}{
		{"Allocate", 2*AllocationCost - 1, func(t *testing.T, f *fixture, c *client) {
			other := f.clientAt("user", "pass", "203.0.113.8:1")
			if m := other.do(stun.MethodAllocate, transportUDP()); code(m) != 508 {
				t.Fatalf("second allocation past the budget: code %d, want 508", code(m))
			}
			if f.e.Allocations() != 1 || f.e.StateBytes() != AllocationCost {
				t.Fatalf("after the 508: %d allocations, %d bytes", f.e.Allocations(), f.e.StateBytes())
			}
			if n := f.e.Refused(RefusedStateAllocate); n != 1 {
				t.Errorf("state_budget_allocate refusals %d, want 1", n)
			}
			// Refresh to 0 gives the first allocation's bytes back.
			if m := c.do(stun.MethodRefresh, lifetimeSetter(0)); code(m) != 0 {
				t.Fatalf("refresh 0: %d", code(m))
			}
			if b := f.e.StateBytes(); b != 0 {
				t.Fatalf("after refresh 0: %d bytes, want 0", b)
			}
			if m := other.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
				t.Fatalf("allocation after the first went: code %d", code(m))
			}
		}},
		{"CreatePermission", AllocationCost + 9*PermissionCost, func(t *testing.T, f *fixture, c *client) {
			if m := c.do(stun.MethodCreatePermission, peerAttrs(0, 10)...); code(m) != 508 {
				t.Fatalf("10 permissions past the budget: code %d, want 508", code(m))
			}
			if p, _ := held(f.e.Lookup(c.ft)); p != 0 || f.e.StateBytes() != AllocationCost {
				t.Fatalf("after the 508: %d permissions, %d bytes; want none installed", p, f.e.StateBytes())
			}
			if n := f.e.Refused(RefusedStatePermission); n != 1 {
				t.Errorf("state_budget_permission refusals %d, want 1", n)
			}
			if m := c.do(stun.MethodCreatePermission, peerAttrs(0, 9)...); code(m) != 0 {
				t.Fatalf("9 permissions within the budget: code %d", code(m))
			}
			// At the budget, refreshing permissions that exist costs nothing;
			// a new one does not fit.
			if m := c.do(stun.MethodCreatePermission, peerAttrs(0, 9)...); code(m) != 0 {
				t.Fatalf("refresh at the budget: code %d", code(m))
			}
			if m := c.do(stun.MethodCreatePermission, peerAttrs(9, 10)...); code(m) != 508 {
				t.Fatalf("one more past the budget: code %d, want 508", code(m))
			}
			// They expire and give their bytes back.
			f.clock.Advance(PermissionLifetime + time.Second)
			f.e.Sweep()
			if p, _ := held(f.e.Lookup(c.ft)); p != 0 || f.e.StateBytes() != AllocationCost {
				t.Fatalf("after expiry: %d permissions, %d bytes, want 0 and %d", p, f.e.StateBytes(), AllocationCost)
			}
			if m := c.do(stun.MethodCreatePermission, peerAttrs(9, 10)...); code(m) != 0 {
				t.Fatalf("after expiry: code %d", code(m))
			}
		}},
		{"ChannelBind", AllocationCost + firstBind + ChannelCost + PermissionCost - 1, func(t *testing.T, f *fixture, c *client) {
			if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peerN(1))); code(m) != 0 {
				t.Fatalf("first channel: code %d", code(m))
			}
			// A second one to a new peer needs a channel and a permission:
			// one byte short.
			if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerN(2))); code(m) != 508 {
				t.Fatalf("second channel past the budget: code %d, want 508", code(m))
			}
			a := f.e.Lookup(c.ft)
			if p, ch := held(a); p != 1 || ch != 1 || f.e.StateBytes() != AllocationCost+firstBind {
				t.Fatalf("after the 508: %d permissions, %d channels, %d bytes", p, ch, f.e.StateBytes())
			}
			if a.channelByNumber(0x4001, f.clock.Now().UnixNano()) != nil {
				t.Fatal("the refused channel is bound")
			}
			if n := f.e.Refused(RefusedStateChannel); n != 1 {
				t.Errorf("state_budget_channel refusals %d, want 1", n)
			}
			// To the first peer's IP on another port it needs no
			// permission: it fits.
			if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(netip.AddrPortFrom(peerN(1).Addr(), 5001))); code(m) != 0 {
				t.Fatalf("channel within the budget: code %d", code(m))
			}
			// Refreshing a binding at the budget costs nothing.
			if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peerN(1))); code(m) != 0 {
				t.Fatalf("refresh at the budget: code %d", code(m))
			}
			// The channels and the permission expire and give their bytes
			// back; the number table stays with the allocation.
			f.clock.Advance(ChannelLifetime + time.Second)
			if m := c.do(stun.MethodRefresh); code(m) != 0 {
				t.Fatalf("refresh: %d", code(m))
			}
			f.e.Sweep()
			if want := int64(AllocationCost + chanDirCost + chanPageCost); f.e.StateBytes() != want {
				t.Fatalf("after expiry: %d bytes, want %d", f.e.StateBytes(), want)
			}
			if m := c.do(stun.MethodRefresh, lifetimeSetter(0)); code(m) != 0 {
				t.Fatalf("refresh 0: %d", code(m))
			}
			if b := f.e.StateBytes(); b != 0 {
				t.Fatalf("after refresh 0: %d bytes, want 0", b)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.StateBudget = tc.budget })
			c := f.client("user", "pass")
			if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
				t.Fatalf("first allocation: code %d", code(m))
			}
			if b := f.e.StateBytes(); b != AllocationCost {
				t.Fatalf("one allocation: %d bytes, want %d", b, AllocationCost)
			}
			tc.run(t, f, c)
		})
	}
}

// TestStateBudgetChannelPages: a ChannelBind that needs a new page of the
// number table (or the directory of 0x5000-0x7FFF) is charged for it, so
// numbers spread one per page cannot make pages for free.
func TestStateBudgetChannelPages(t *testing.T) {
	first := int64(AllocationCost + ChannelCost + PermissionCost + chanDirCost + chanPageCost)
	f := newFixture(t, func(c *Config) { c.StateBudget = first + ChannelCost + chanPageCost - 1 })
	c := f.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peerN(1))); code(m) != 0 {
		t.Fatalf("first channel: code %d", code(m))
	}
	same := netip.AddrPortFrom(peerN(1).Addr(), 5001)
	// 0x4040 is on the next page: a page short.
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4040), peerAttr(same)); code(m) != 508 {
		t.Fatalf("channel on a new page past the budget: code %d, want 508", code(m))
	}
	if f.e.Lookup(c.ft).nums.Load().slot(0x4040, false) != nil {
		t.Fatal("the refused ChannelBind made a page")
	}
	// 0x4001 is on the first page: it fits.
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(same)); code(m) != 0 {
		t.Fatalf("channel on the first page: code %d", code(m))
	}
	// A number above 0x4FFF also needs the high directory.
	g := newFixture(t, func(c *Config) { c.StateBudget = first + chanHighCost - 1 })
	c = g.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x6000), peerAttr(peerN(1))); code(m) != 508 {
		t.Fatalf("first channel above 0x4FFF a directory short: code %d, want 508", code(m))
	}
	if g.e.Lookup(c.ft).nums.Load() != nil {
		t.Fatal("the refused ChannelBind made the number table")
	}
	g.e.Reconfigure(Settings{Realm: testRealm, Auth: StaticAuth{Username: "user", Password: "pass"}, StateBudget: first + chanHighCost})
	if m := c.do(stun.MethodChannelBind, channelNumber(0x6000), peerAttr(peerN(1))); code(m) != 0 {
		t.Fatalf("with the directory's bytes: code %d", code(m))
	}
}

// leanRelays hands out relays that hold nothing but their address, so that
// TestStateCosts measures the engine's own state.
type leanRelays struct{ next uint32 }

type leanRelay struct{ addr netip.AddrPort }

func (r *leanRelay) Addr() netip.AddrPort { return r.addr }
func (r *leanRelay) Close() error         { return nil }
func (r *leanRelay) Socket() int          { return -1 }

func (l *leanRelays) Allocate(*Allocation, RelayRequest) (Relay, uint64, error) {
	l.next++
	return &leanRelay{addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 1}), uint16(l.next))}, 0, nil
}

// indexBase is the part of AllocationCost for the first slot array of a
// peer index (minIndexSlots pointers, and the slice header the index
// points to).
const indexBase = 96

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestStateCosts measures what allocations, permissions and channels
// really hold on the Go heap, over thousands of each, and checks that the
// costs the budget charges cover them: otherwise the budget would not
// bound ternd's memory. The figures it logs are the ones
// docs/security.md quotes.
func TestStateCosts(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Relays = &leanRelays{} })
	const allocs, perAlloc = 2000, 256
	cs := make([]*client, allocs)
	for i := range cs {
		cs[i] = f.clientAt("user", "pass", fmt.Sprintf("203.0.%d.%d:40000", i>>8, i&0xFF))
		cs[i].learnNonce(f.send(cs[i].ft, raw(t, stun.MethodAllocate, transportUDP())))
	}
	step := func(what string, n int, limit int64, do func()) {
		t.Helper()
		before := liveHeap()
		do()
		per := (liveHeap() - before) / int64(n)
		t.Logf("%s: %d bytes each (charged %d)", what, per, limit)
		if per > limit {
			t.Errorf("%s costs %d bytes, more than the %d the budget charges", what, per, limit)
		}
	}
	ok := func(m *stun.Message) {
		t.Helper()
		if code(m) != 0 {
			t.Fatalf("code %d", code(m))
		}
	}
	// Allocations, before their first ChannelBind makes their peer
	// indexes (below).
	step("allocation", allocs, AllocationCost-2*indexBase, func() {
		for _, c := range cs {
			ok(f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP())))
		}
	})
	const full = 40
	step("permission", full*perAlloc, PermissionCost, func() {
		for _, c := range cs[:full] {
			for i := range perAlloc {
				ok(f.send(c.ft, c.signed(stun.MethodCreatePermission, peerAttr(peerN(i)))))
			}
		}
	})
	step("channel, consecutive numbers", full*perAlloc, ChannelCost+chanPageCost/chanPageSize, func() {
		for _, c := range cs[:full] {
			for i := range perAlloc {
				ok(f.send(c.ft, c.signed(stun.MethodChannelBind, channelNumber(uint16(minChannelNumber+i)), peerAttr(peerN(i)))))
			}
		}
	})
	rest := cs[full : full+1000]
	// The first ChannelBind of an allocation also makes the number table
	// and the first slot arrays of its two peer indexes, which
	// AllocationCost covers.
	step("first channel and permission of an allocation", len(rest),
		ChannelCost+PermissionCost+chanDirCost+chanPageCost+2*indexBase, func() {
			for _, c := range rest {
				ok(f.send(c.ft, c.signed(stun.MethodChannelBind, channelNumber(minChannelNumber), peerAttr(peerN(1)))))
			}
		})
	runtime.KeepAlive(cs)
}

// TestStateBudgetGivesEverythingBack: clients that allocate, install
// permissions and channels, delete and allocate again concurrently, under
// a budget they keep hitting, leave nothing charged once every allocation
// is gone, so the count neither leaks nor goes below zero.
func TestStateBudgetGivesEverythingBack(t *testing.T) {
	// Less than one client's 128 permissions, so that even clients run one
	// after the other reach it.
	f := newFixture(t, func(c *Config) { c.StateBudget = 2*AllocationCost + 100*PermissionCost })
	const clients = 16
	type signedSet struct {
		ft       FiveTuple
		requests [][]byte
	}
	sets := make([]signedSet, clients)
	for i := range sets {
		c := f.clientAt("user", "pass", fmt.Sprintf("203.0.113.%d:1000", i+1))
		c.learnNonce(f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP())))
		reqs := [][]byte{c.signed(stun.MethodAllocate, transportUDP())}
		for k := range 8 {
			reqs = append(reqs, c.signed(stun.MethodCreatePermission, peerAttrs(16*k, 16*k+16)...),
				c.signed(stun.MethodChannelBind, channelNumber(uint16(0x4000+64*k)), peerAttr(peerN(200+k))))
		}
		reqs = append(reqs, c.signed(stun.MethodRefresh, lifetimeSetter(0)))
		sets[i] = signedSet{ft: c.ft, requests: reqs}
	}
	done := make(chan struct{})
	for _, s := range sets {
		go func() {
			defer func() { done <- struct{}{} }()
			var r Result
			for range 20 {
				for _, req := range s.requests {
					f.e.HandleClient(testListener{}, s.ft, req, &r)
				}
			}
			// Half the clients keep their last allocation for Close.
			if s.ft.Client.Addr().As4()[3]%2 == 0 {
				f.e.HandleClient(testListener{}, s.ft, s.requests[0], &r)
				f.e.HandleClient(testListener{}, s.ft, s.requests[1], &r)
			}
		}()
	}
	for range sets {
		<-done
	}
	if f.e.StateBytes() > f.e.StateBudget() {
		t.Fatalf("%d bytes charged, past the budget %d", f.e.StateBytes(), f.e.StateBudget())
	}
	if f.e.Refused(RefusedStatePermission)+f.e.Refused(RefusedStateChannel)+f.e.Refused(RefusedStateAllocate) == 0 {
		t.Error("the clients never reached the budget")
	}
	f.e.Close()
	if b := f.e.StateBytes(); b != 0 {
		t.Fatalf("after Close: %d bytes charged, want 0", b)
	}
}
