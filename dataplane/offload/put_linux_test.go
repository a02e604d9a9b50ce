package offload

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestPutRejects checks that Put refuses what the kernel cannot relay,
// naming the field, and that a full map is an error that leaves nothing
// half installed.
func TestPutRejects(t *testing.T) {
	r := newRunner(t)
	good := v4.path(time.Now().Add(time.Hour))
	for _, c := range []struct {
		name string
		edit func(p *Path)
		want string
	}{
		{"mixed families", func(p *Path) { p.Peer = netip.MustParseAddrPort("[fd00::9]:1") }, "mixed address families"},
		{"no client", func(p *Path) { p.Client = netip.AddrPort{} }, "client address"},
		{"zero port", func(p *Path) { p.Relay = netip.MustParseAddrPort("10.0.2.1:0") }, "relay address"},
		{"unspecified", func(p *Path) { p.Listener = netip.MustParseAddrPort("0.0.0.0:3478") }, "listener address"},
		{"channel low", func(p *Path) { p.Channel = 0x3fff }, "channel number 0x3fff"},
		{"channel high", func(p *Path) { p.Channel = 0x8000 }, "channel number 0x8000"},
		{"no expiry", func(p *Path) { p.Expires = time.Time{} }, "no Expires"},
		{"counter", func(p *Path) { p.Counter = MaxCounters }, "counter slot 4096"},
	} {
		p := good
		c.edit(&p)
		err := r.o.Put(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Put error %v, want one naming %q", c.name, err, c.want)
		}
		// Delete refuses the same keys, and needs no Expires or Counter.
		keyOnly := c.name == "no expiry" || c.name == "counter"
		if err := r.o.Delete(p); (err == nil) != keyOnly {
			t.Errorf("%s: Delete error %v", c.name, err)
		}
	}

	// newRunner installed 2 paths; fill the rest with distinct clients.
	n := 2
	var err error
	for i := 0; err == nil && n <= MaxPaths; i++ {
		p := good
		p.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 29001)
		p.Peer = p.Client
		if err = r.o.Put(p); err == nil {
			n++
		}
	}
	if err == nil || !strings.Contains(err.Error(), "full") || n != MaxPaths {
		t.Fatalf("after %d paths: Put error %v, want a full map at %d", n, err, MaxPaths)
	}
	var c2p, p2c int
	for it := r.o.objs.C2p.Iterate(); it.Next(new(ternC2pKey), new(ternC2pVal)); c2p++ {
	}
	for it := r.o.objs.P2c.Iterate(); it.Next(new(ternP2cKey), new(ternP2cVal)); p2c++ {
	}
	if c2p != MaxPaths || p2c != MaxPaths {
		t.Errorf("maps hold %d and %d entries, want %d each", c2p, p2c, MaxPaths)
	}
}

// TestPutReplaces rebinds a channel to another peer and checks that the
// old peer's datagrams no longer reach the client in the kernel.
func TestPutReplaces(t *testing.T) {
	r := newRunner(t)
	count := func() (c2p, p2c int) {
		for it := r.o.objs.C2p.Iterate(); it.Next(new(ternC2pKey), new(ternC2pVal)); c2p++ {
		}
		for it := r.o.objs.P2c.Iterate(); it.Next(new(ternP2cKey), new(ternP2cVal)); p2c++ {
		}
		return c2p, p2c
	}
	c0, p0 := count()
	p := Path{
		Client: netip.MustParseAddrPort(runClient), Listener: netip.MustParseAddrPort(runListener),
		Relay: netip.MustParseAddrPort(runRelay), Peer: netip.MustParseAddrPort("127.0.0.5:29002"),
		Channel: 0x4001, Expires: time.Now().Add(time.Hour), Counter: 1,
	}
	if err := r.o.Put(p); err != nil {
		t.Fatal(err)
	}
	if c, p := count(); c != c0 || p != p0 {
		t.Errorf("after rebinding: %d and %d entries, want %d and %d", c, p, c0, p0)
	}
	in := frame(runPeer, runRelay, []byte("old peer"))
	if ret, out := r.run(t, TC, in); ret != tcActOK || !bytes.Equal(out, in) {
		t.Errorf("the old peer's datagram was relayed: %d %x", ret, out)
	}
	// Another channel for the same peer and relay replaces the other way.
	p.Channel = 0x4002
	if err := r.o.Put(p); err != nil {
		t.Fatal(err)
	}
	if c, p := count(); c != c0 || p != p0 {
		t.Errorf("after renumbering: %d and %d entries, want %d and %d", c, p, c0, p0)
	}
}
