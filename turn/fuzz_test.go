package turn

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/pion/stun/v2"
)

// fuzzSeeds are well-formed packets of every kind the engine takes from a
// client; the corpus in testdata/fuzz holds them too.
func fuzzSeeds(t testing.TB) [][]byte {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.learnNonce(f.send(clientTuple, raw(t, stun.MethodAllocate, transportUDP())))
	return [][]byte{
		channelData(0x4001, []byte("hello")),
		sendIndication(t, peerAddr, []byte("hello")),
		raw(t, stun.MethodBinding, stun.Fingerprint),
		c.signed(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0x80}}),
		c.signed(stun.MethodCreatePermission, peerAttr(peerAddr)),
		c.signed(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)),
		c.signed(stun.MethodRefresh, lifetimeSetter(0)),
		unhex(t, rfc5769Request),
		unhex(t, rfc5769LongTerm),
	}
}

// FuzzHandleClient feeds arbitrary client packets to an engine that has an
// allocation with a bound channel. It must never panic, a relayed payload
// must lie inside the packet, and every reply must be a STUN message.
func FuzzHandleClient(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	e, _, _, _ := hotFixture(f)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		var r Result
		e.HandleClient(testListener{}, clientTuple, pkt, &r)
		switch r.Kind {
		case Forward:
			if len(r.Payload) > len(pkt) || (len(r.Payload) > 0 && !bytes.Contains(pkt, r.Payload)) {
				t.Fatalf("payload %x is not part of the packet", r.Payload)
			}
		case Reply:
			if err := stun.Decode(r.Reply, new(stun.Message)); err != nil {
				t.Fatalf("reply does not decode: %v", err)
			}
		case Drop:
			if r.Drop == DropNone {
				t.Fatal("drop without a reason")
			}
		}
	})
}

// FuzzHandlePeer frames arbitrary peer datagrams from arbitrary peers.
func FuzzHandlePeer(f *testing.F) {
	f.Add([]byte("hello"), []byte{198, 51, 100, 10}, uint16(9000))
	f.Add([]byte{}, []byte{198, 51, 100, 11}, uint16(1))
	f.Add(bytes.Repeat([]byte{0xAB}, 1201), []byte{127, 0, 0, 1}, uint16(0))
	e, a, _, _ := hotFixture(f)
	f.Fuzz(func(t *testing.T, payload []byte, ip []byte, port uint16) {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		buf := make([]byte, PeerHeadroom+len(payload)+PeerTailroom)
		copy(buf[PeerHeadroom:], payload)
		msg, ok := e.HandlePeer(a, netip.AddrPortFrom(addr, port), buf, PeerHeadroom, len(payload))
		if !ok {
			return
		}
		if msg[0]&0xC0 == 0 {
			m := new(stun.Message)
			if err := stun.Decode(append([]byte(nil), msg...), m); err != nil {
				t.Fatalf("Data indication does not decode: %v", err)
			}
			if d, _ := m.Get(stun.AttrData); !bytes.Equal(d, payload) {
				t.Fatal("DATA differs from the payload")
			}
		} else if !bytes.Equal(msg[4:4+len(payload)], payload) {
			t.Fatal("ChannelData payload differs")
		}
	})
}

// TestWriteFuzzCorpus regenerates the seed corpora in testdata/fuzz from
// fuzzSeeds and a few peers when TERN_WRITE_CORPUS=1 (make generate).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("TERN_WRITE_CORPUS") != "1" {
		t.Skip("set TERN_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzHandleClient")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join("testdata", "fuzz", "FuzzHandlePeer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, p := range []netip.AddrPort{peerAddr, netip.MustParseAddrPort("[2001:db8:1::5]:7000"), deniedPeer} {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint16(%d)\n", "media", p.Addr().AsSlice(), p.Port())
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
