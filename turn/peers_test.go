package turn

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

// TestIndex fills an index past several resizes, finds every entry and
// misses others, then removes half and checks the rest survive.
func TestIndex(t *testing.T) {
	var x index[permission, *permission]
	if x.get(keyOfAddr(netip.MustParseAddr("192.0.2.1"), 0)) != nil {
		t.Fatal("empty index found an entry")
	}
	const n = 5000
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	for i := range n {
		x.insert(&permission{peer: ip(i), key: keyOfAddr(ip(i), 0)})
	}
	for i := range n {
		if p := x.get(keyOfAddr(ip(i), 0)); p == nil || p.peer != ip(i) {
			t.Fatalf("entry %d: got %v", i, p)
		}
	}
	if x.get(keyOfAddr(ip(n), 0)) != nil || x.get(keyOfAddr(ip(1), 1)) != nil {
		t.Fatal("found an entry never inserted")
	}
	if got := x.removeIf(func(p *permission) bool { return p.peer.As4()[3]&1 == 0 }); got != n/2 || x.n != n/2 {
		t.Fatalf("removed %d, %d left; want %d each", got, x.n, n/2)
	}
	for i := range n {
		if got := x.get(keyOfAddr(ip(i), 0)) != nil; got != (i&1 == 1) {
			t.Fatalf("entry %d present = %v after removing the even ones", i, got)
		}
	}
	// An IPv4 peer and its IPv4-mapped IPv6 form are one key.
	if x.get(keyOfAddr(netip.AddrFrom16(ip(1).As16()), 0)) == nil {
		t.Error("::ffff:10.0.0.1 did not find 10.0.0.1")
	}
}

// TestFullChannelRange binds every RFC 8656 channel number on one
// allocation, relays on each both ways, and rebinds a number once its
// binding has expired.
func TestFullChannelRange(t *testing.T) {
	f, c, a := allocated(t)
	peer := func(i int) netip.AddrPort { return benchPeer(i) }
	for i := range MaxChannels {
		if m := c.do(stun.MethodChannelBind, channelNumber(uint16(minChannelNumber+i)), peerAttr(peer(i))); code(m) != 0 {
			t.Fatalf("channel %d: code %d", i, code(m))
		}
	}
	var r Result
	buf := make([]byte, PeerHeadroom+16+PeerTailroom)
	for i := range MaxChannels {
		num := uint16(minChannelNumber + i)
		f.e.HandleClient(testListener{}, clientTuple, channelData(num, []byte("x")), &r)
		if r.Kind != Forward || r.Peer != peer(i) {
			t.Fatalf("ChannelData on %#x: kind %d drop %v peer %v", num, r.Kind, r.Drop, r.Peer)
		}
		msg, _, ok := f.e.HandlePeer(a, peer(i), buf, PeerHeadroom, 1)
		if !ok || uint16(msg[0])<<8|uint16(msg[1]) != num {
			t.Fatalf("from %v: ok %v, framed on %x, want %#x", peer(i), ok, msg[:2], num)
		}
	}
	if a.byPeer.n != MaxChannels || a.perms.n != 256 {
		t.Fatalf("%d channels, %d permissions; want %d and 256", a.byPeer.n, a.perms.n, MaxChannels)
	}
	// Keep the allocation, let every binding expire, and sweep.
	f.clock.Advance(ChannelLifetime / 2)
	c.do(stun.MethodRefresh)
	f.clock.Advance(ChannelLifetime/2 + time.Second)
	f.e.Sweep()
	if a.byPeer.n != 0 || a.perms.n != 0 {
		t.Fatalf("after expiry: %d channels, %d permissions", a.byPeer.n, a.perms.n)
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4FFF), peerAttr(peer(0))); code(m) != 0 {
		t.Fatalf("rebinding after expiry: code %d", code(m))
	}
}

// TestPermissionCap: an allocation holds at most MaxPermissions peer IPs;
// past it CreatePermission and ChannelBind get 508 and install nothing,
// while refreshing installed permissions still works.
func TestPermissionCap(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrRequestedAddressFamily, Value: []byte{2, 0, 0, 0}}); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	a := f.e.Lookup(clientTuple)
	peer := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 14: byte(i >> 8), 15: byte(i)}), 7000)
	}
	batch := func(from, to int) []stun.Setter {
		var s []stun.Setter
		for i := from; i < to; i++ {
			s = append(s, peerAttr(peer(i)))
		}
		return s
	}
	for i := 0; i < MaxPermissions; i += 256 {
		if m := c.do(stun.MethodCreatePermission, batch(i, i+256)...); code(m) != 0 {
			t.Fatalf("permissions %d-%d: code %d", i, i+255, code(m))
		}
	}
	if m := c.do(stun.MethodCreatePermission, batch(MaxPermissions-1, MaxPermissions+1)...); code(m) != 508 {
		t.Fatalf("one past the cap: code %d, want 508", code(m))
	}
	if a.hasPermission(peer(MaxPermissions).Addr(), f.e.now()) {
		t.Error("a refused CreatePermission installed a permission")
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peer(MaxPermissions))); code(m) != 508 {
		t.Fatalf("ChannelBind to a new IP at the cap: code %d, want 508", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peer(5))); code(m) != 0 {
		t.Fatalf("ChannelBind to a permitted IP at the cap: code %d", code(m))
	}
	if m := c.do(stun.MethodCreatePermission, batch(0, 10)...); code(m) != 0 {
		t.Fatalf("refresh at the cap: code %d", code(m))
	}
}

// TestRelayWhileBinding relays on one channel while other goroutines bind,
// refresh and sweep, for the race detector: readers take no lock.
func TestRelayWhileBinding(t *testing.T) {
	f, c, a := allocated(t)
	c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(peerAddr))
	binds := make([][]byte, 512)
	for i := range binds {
		binds[i] = c.signed(stun.MethodChannelBind, channelNumber(uint16(0x4001+i)), peerAttr(benchPeer(i+1)))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		var r Result
		buf := make([]byte, PeerHeadroom+16+PeerTailroom)
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.e.HandleClient(testListener{}, clientTuple, channelData(0x4000, []byte("x")), &r)
			if r.Kind != Forward {
				t.Errorf("relay on 0x4000 failed while binding: drop %v", r.Drop)
				return
			}
			if _, _, ok := f.e.HandlePeer(a, peerAddr, buf, PeerHeadroom, 1); !ok {
				t.Error("peer data dropped while binding")
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 5; i++ {
			f.e.Sweep()
			time.Sleep(time.Millisecond)
		}
	}()
	var r Result
	for _, b := range binds {
		f.e.HandleClient(testListener{}, clientTuple, b, &r)
	}
	close(stop)
	wg.Wait()
	if a.byPeer.n != len(binds)+1 {
		t.Fatalf("%d channels bound, want %d", a.byPeer.n, len(binds)+1)
	}
}

// TestChannelCapAcrossRange binds MaxChannels channels spread over the
// whole accepted range 0x4000-0x7FFF (every fourth number, so the page
// directory of 0x5000-0x7FFF is made and filled); relays on the highest;
// and refuses one more with 508, so the cap, not the number range, bounds
// an allocation's channels.
func TestChannelCapAcrossRange(t *testing.T) {
	f, c, a := allocated(t)
	for i := range MaxChannels {
		if m := c.do(stun.MethodChannelBind, channelNumber(uint16(minChannelNumber+4*i)), peerAttr(benchPeer(i))); code(m) != 0 {
			t.Fatalf("channel %#x: code %d", minChannelNumber+4*i, code(m))
		}
	}
	top := uint16(minChannelNumber + 4*(MaxChannels-1))
	if top != 0x7FFC {
		t.Fatalf("highest number bound %#x, want 0x7ffc", top)
	}
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, channelData(top, []byte("x")), &r)
	if r.Kind != Forward || r.Peer != benchPeer(MaxChannels-1) {
		t.Fatalf("ChannelData on %#x: kind %d drop %v peer %v", top, r.Kind, r.Drop, r.Peer)
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x7FFF), peerAttr(benchPeer(MaxChannels))); code(m) != 508 {
		t.Fatalf("channel past MaxChannels: code %d, want 508", code(m))
	}
	if a.byPeer.n != MaxChannels {
		t.Fatalf("%d channels, want %d", a.byPeer.n, MaxChannels)
	}
}
