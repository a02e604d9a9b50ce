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

// clientSeed is one input of FuzzHandleClient: a packet, and whether the target signs it
// before the engine sees it.
type clientSeed struct {
	pkt  []byte
	sign bool
}

// seedTID is a fixed transaction ID for seed i, so the seeds, and with them the committed
// corpus, are the same bytes on every run and TestFuzzCorpus can compare them.
func seedTID(i byte) stun.Setter {
	var id [stun.TransactionIDSize]byte
	copy(id[:], "tern-fuzz-")
	id[len(id)-1] = i
	return stun.NewTransactionIDSetter(id)
}

// seedMsg builds a STUN message of type typ with transaction ID seedTID(i).
func seedMsg(t testing.TB, i byte, typ stun.MessageType, attrs ...stun.Setter) []byte {
	t.Helper()
	m, err := stun.Build(append([]stun.Setter{seedTID(i), typ}, attrs...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

// clientSeeds are well-formed packets of every kind the engine takes from a client. The
// requests that need authentication are unsigned and marked sign: a signature made here would
// carry a nonce of another engine (the nonce key is random per engine), so the engine would
// answer 438 and the fuzzer would never get past authentication.
func clientSeeds(t testing.TB) []clientSeed {
	req := func(m stun.Method) stun.MessageType { return stun.NewType(m, stun.ClassRequest) }
	return []clientSeed{
		{channelData(0x4001, []byte("hello")), false},
		{seedMsg(t, 1, stun.NewType(stun.MethodSend, stun.ClassIndication),
			peerAttr(peerAddr), stun.RawAttribute{Type: stun.AttrData, Value: []byte("hello")}), false},
		{seedMsg(t, 2, req(stun.MethodBinding), stun.Fingerprint), false},
		{seedMsg(t, 3, req(stun.MethodAllocate), transportUDP(), stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0x80}}), true},
		{seedMsg(t, 4, req(stun.MethodCreatePermission), peerAttr(peerAddr)), true},
		{seedMsg(t, 5, req(stun.MethodChannelBind), channelNumber(0x4001), peerAttr(peerAddr)), true},
		{seedMsg(t, 6, req(stun.MethodRefresh), lifetimeSetter(0)), true},
		{seedMsg(t, 7, req(stun.MethodAllocate), transportUDP()), false}, // the 401 path
		{unhex(t, rfc5769Request), false},
		{unhex(t, rfc5769LongTerm), false},
		// Address families (RFC 8656 §7.2): a dual allocation, and the
		// drafts' ADDITIONAL-ADDRESS-FAMILY with REQUESTED-ADDRESS-FAMILY (400).
		{seedMsg(t, 8, req(stun.MethodAllocate), transportUDP(), additionalFamilyAttr(familyIPv6)), true},
		{seedMsg(t, 9, req(stun.MethodAllocate), transportUDP(), requestedFamily(familyIPv6),
			stun.RawAttribute{Type: attrAdditionalAddressFamilyDraft, Value: []byte{familyIPv6, 0, 0, 0}}), true},
	}
}

// peerSeed is one input of FuzzHandlePeer: a payload from a peer address.
type peerSeed struct {
	payload []byte
	peer    netip.AddrPort
}

// peerSeeds reach each way HandlePeer answers: the bound channel, a permission without a
// channel (Data indication), a peer without a permission, an IPv6 peer, and a peer outside the
// allowlist.
func peerSeeds() []peerSeed {
	return []peerSeed{
		{[]byte("media"), peerAddr},
		{[]byte("media"), netip.AddrPortFrom(peerAddr.Addr(), peerAddr.Port()+1)},
		{[]byte{}, netip.MustParseAddrPort("198.51.100.11:1")},
		{[]byte("media"), netip.MustParseAddrPort("[2001:db8:1::5]:7000")},
		{bytes.Repeat([]byte{0xAB}, 1201), deniedPeer},
	}
}

// fuzzEngine is an engine with an allocation for clientTuple and channel 0x4001 bound to
// peerAddr, and the client that made it (holding a valid nonce).
func fuzzEngine(t testing.TB) (*fixture, *client) {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	return f, c
}

// resign returns pkt signed by c if it decodes as a STUN request: its own USERNAME, REALM,
// NONCE, integrity and FINGERPRINT attributes are replaced by c's credentials and current
// nonce, the rest is kept in order. Anything else is returned unchanged.
func (c *client) resign(pkt []byte) []byte {
	m := new(stun.Message)
	if err := stun.Decode(append([]byte(nil), pkt...), m); err != nil || m.Type.Class != stun.ClassRequest {
		return pkt
	}
	s := []stun.Setter{stun.NewTransactionIDSetter(m.TransactionID), m.Type}
	for _, a := range m.Attributes {
		switch a.Type {
		case stun.AttrUsername, stun.AttrRealm, stun.AttrNonce, stun.AttrMessageIntegrity,
			stun.AttrMessageIntegritySHA256, stun.AttrFingerprint:
		default:
			s = append(s, stun.RawAttribute{Type: a.Type, Value: a.Value})
		}
	}
	s = append(s, stun.NewUsername(c.user), stun.NewRealm(testRealm), stun.NewNonce(c.nonce),
		stun.NewLongTermIntegrity(c.user, testRealm, c.pass), stun.Fingerprint)
	out, err := stun.Build(s...)
	if err != nil {
		return pkt // an attribute the fuzzer made that stun.Build refuses
	}
	return out.Raw
}

// FuzzHandleClient feeds arbitrary client packets to an engine that has an allocation with a
// bound channel. With sign set, a packet that decodes as a request is signed with valid
// credentials first, so the fuzzer reaches the request handlers behind authentication. Each
// input gets a fresh engine, so a failure reproduces from its input alone. The engine must never
// panic, a relayed payload must lie inside the packet, every reply must be a STUN message, and a
// signed request must never be refused for its credentials or nonce.
func FuzzHandleClient(f *testing.F) {
	for _, s := range clientSeeds(f) {
		f.Add(s.pkt, s.sign)
	}
	f.Fuzz(func(t *testing.T, pkt []byte, sign bool) {
		fx, c := fuzzEngine(t)
		if sign {
			pkt = c.resign(pkt)
		}
		var r Result
		fx.e.HandleClient(testListener{}, clientTuple, pkt, &r)
		switch r.Kind {
		case Forward:
			if len(r.Payload) > len(pkt) || (len(r.Payload) > 0 && !bytes.Contains(pkt, r.Payload)) {
				t.Fatalf("payload %x is not part of the packet", r.Payload)
			}
		case Reply:
			m := new(stun.Message)
			if err := stun.Decode(r.Reply, m); err != nil {
				t.Fatalf("reply does not decode: %v", err)
			}
			if sign && m.Contains(stun.AttrNonce) && (code(m) == int(stun.CodeUnauthorized) || code(m) == int(stun.CodeStaleNonce)) {
				t.Fatalf("signed request refused with %d", code(m))
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
	for _, s := range peerSeeds() {
		f.Add(s.payload, s.peer.Addr().AsSlice(), s.peer.Port())
	}
	e, a, _, _ := hotFixture(f)
	f.Fuzz(func(t *testing.T, payload []byte, ip []byte, port uint16) {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return // not an address; nothing a socket could deliver
		}
		buf := make([]byte, PeerHeadroom+len(payload)+PeerTailroom)
		copy(buf[PeerHeadroom:], payload)
		msg, _, ok := e.HandlePeer(a, netip.AddrPortFrom(addr, port), buf, PeerHeadroom, len(payload))
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

// corpusFiles returns the seed corpus files testdata/fuzz should hold, by path, in the format
// of `go test fuzz v1`.
func corpusFiles(t testing.TB) map[string]string {
	files := map[string]string{}
	for i, s := range clientSeeds(t) {
		files[filepath.Join("FuzzHandleClient", fmt.Sprintf("seed%02d", i))] =
			fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%t)\n", s.pkt, s.sign)
	}
	for i, s := range peerSeeds() {
		files[filepath.Join("FuzzHandlePeer", fmt.Sprintf("seed%02d", i))] =
			fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint16(%d)\n", s.payload, s.peer.Addr().AsSlice(), s.peer.Port())
	}
	for i, s := range usernameSeeds() {
		files[filepath.Join("FuzzParseEphemeralUsername", fmt.Sprintf("seed%02d", i))] =
			fmt.Sprintf("go test fuzz v1\nstring(%q)\n", s)
	}
	return files
}

// TestFuzzCorpus checks that the committed seed corpus in testdata/fuzz is the one the seeds
// above produce, so `go test -fuzz` starts from every kind of packet even where f.Add seeds are
// not run (a corpus replayed by other tools) and a changed target signature cannot leave stale
// files behind that go test would reject. TERN_WRITE_CORPUS=1 rewrites the files instead.
func TestFuzzCorpus(t *testing.T) {
	write := os.Getenv("TERN_WRITE_CORPUS") == "1"
	root := filepath.Join("testdata", "fuzz")
	want := corpusFiles(t)
	for _, target := range []string{"FuzzHandleClient", "FuzzHandlePeer", "FuzzParseEphemeralUsername"} {
		old, err := filepath.Glob(filepath.Join(root, target, "seed*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range old {
			rel, _ := filepath.Rel(root, p)
			if _, ok := want[rel]; ok {
				continue
			}
			if write {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Errorf("%s is not a seed any more; rerun with TERN_WRITE_CORPUS=1", p)
			}
		}
	}
	for rel, body := range want {
		p := filepath.Join(root, rel)
		if write {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != body {
			t.Errorf("%s is stale or missing (%v); rerun with TERN_WRITE_CORPUS=1", p, err)
		}
	}
}
