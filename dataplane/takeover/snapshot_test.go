package takeover

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tern-gw/tern/turn"
)

// sample is a snapshot with one listener of two sockets and two
// allocations: a dual one with a permission and a channel, and a plain one.
func sample() *Snapshot {
	ap := netip.MustParseAddrPort
	return &Snapshot{
		Created:  1_700_000_000_000_000_000,
		Realm:    "stunner.l7mp.io",
		NonceKey: [32]byte{1, 2, 3},
		Listeners: []Listener{
			{Name: "udp", Address: ap("127.0.0.1:3478"), Sockets: 2},
		},
		Allocations: []Allocation{
			{Listener: 0, Key: []byte("0123456789abcdef"), AllocationState: turn.AllocationState{
				FiveTuple:    turn.FiveTuple{Client: ap("127.0.0.1:50000"), Server: ap("127.0.0.1:3478"), Proto: turn.ProtoUDP},
				Username:     "1700000000:user",
				Relays:       []netip.AddrPort{ap("127.0.0.1:49152"), ap("[::1]:49153")},
				Expires:      1_700_000_600_000_000_000,
				LastTxID:     [12]byte{9, 8, 7},
				Token:        0xABCDEF,
				AddressError: 0,
				Permissions:  []turn.PermissionState{{Peer: netip.MustParseAddr("10.0.0.1"), Expires: 5}},
				Channels:     []turn.ChannelState{{Number: 0x4000, Peer: ap("10.0.0.1:9000"), Expires: 6}},
			}},
			{Listener: 0, AllocationState: turn.AllocationState{
				FiveTuple: turn.FiveTuple{Client: ap("[::1]:50001"), Server: ap("[::1]:3478"), Proto: turn.ProtoUDP},
				Username:  "user",
				Relays:    []netip.AddrPort{ap("[::1]:49154")},
				Expires:   7,
			}},
		},
		Slots:      2,
		StateBytes: 4096,
		Counters: []Counter{
			{Series: `stunner_listener_packets_total{name="udp",direction="rx"}`, Value: 120},
			{Series: "tern_auth_failures_total", Value: 3},
		},
		DTLSListeners: []DTLSListener{{Name: "dtls", Address: ap("127.0.0.1:5349")}},
		Associations: []Association{
			{Listener: 0, Client: ap("127.0.0.1:50002"), Local: ap("127.0.0.1:5349"), Suite: 0xc02b, Epoch: 1,
				LocalKey: bytes.Repeat([]byte{1}, 16), RemoteKey: bytes.Repeat([]byte{2}, 16),
				LocalIV: [4]byte{3}, RemoteIV: [4]byte{4}, NextSeq: 1<<32 + 9, ReplayTop: 12, ReplayMask: 0b1011,
				Allocations: []Allocation{{Key: []byte("fedcba9876543210"), AllocationState: turn.AllocationState{
					FiveTuple: turn.FiveTuple{Client: ap("127.0.0.1:50002"), Server: ap("127.0.0.1:5349"), Proto: turn.ProtoDTLS},
					Username:  "user",
					Relays:    []netip.AddrPort{ap("127.0.0.1:49155")},
					Expires:   8,
					Channels:  []turn.ChannelState{{Number: 0x4001, Peer: ap("10.0.0.2:9000"), Expires: 9}},
				}}}},
			{Listener: 0, Client: ap("[::1]:50003"), Local: ap("[::1]:5349"), Suite: 0xc030, Epoch: 1,
				LocalKey: bytes.Repeat([]byte{5}, 32), RemoteKey: bytes.Repeat([]byte{6}, 32), NextSeq: 7},
		},
	}
}

var cmpAddrs = []cmp.Option{
	cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
	cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y }),
}

func TestRoundTrip(t *testing.T) {
	for name, s := range map[string]*Snapshot{"sample": sample(), "empty": {Realm: "r"}} {
		t.Run(name, func(t *testing.T) {
			b, err := Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if s.Allocations == nil {
				s.Allocations = got.Allocations // nil and empty are one
			}
			for i := range got.Allocations {
				if len(got.Allocations[i].Key) == 0 {
					got.Allocations[i].Key = s.Allocations[i].Key
				}
			}
			for i := range got.Associations {
				if len(got.Associations[i].Allocations) == 0 {
					got.Associations[i].Allocations = s.Associations[i].Allocations
				}
			}
			if diff := cmp.Diff(s, got, cmpAddrs...); diff != "" {
				t.Errorf("decoded snapshot differs (-encoded +decoded):\n%s", diff)
			}
		})
	}
	if n := sample().FDs(); n != 7 {
		t.Errorf("FDs() = %d, want 2 listener sockets, 3 relay sockets, a DTLS listener socket and its association's relay socket", n)
	}
}

// reseal rewrites b's version and checksum, as a ternd of another version
// would have written them.
func reseal(b []byte, version uint16) []byte {
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint16(b[8:10], version)
	sum := sha256.Sum256(b[:len(b)-sumLen])
	copy(b[len(b)-sumLen:], sum[:])
	return b
}

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[headerLen+3] ^= 0x40
	tooShort := reseal(good[:len(good)-1], Version)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"older version", reseal(good, Version-1), ErrVersion},
		{"newer version", reseal(good, Version+1), ErrVersion},
		{"flipped bit", flipped, ErrChecksum},
		{"cut short", good[:len(good)-10], ErrMalformed},
		{"length mismatch", tooShort, ErrMalformed},
		{"not a snapshot", []byte("hello"), ErrMalformed},
		{"empty", nil, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Decode(tc.b)
			if !errors.Is(err, tc.want) || s != nil {
				t.Errorf("Decode = %v, %v; want nil and %v", s, err, tc.want)
			}
		})
	}
}

// TestDecodeMalformedPayload: a payload that matches its checksum but not
// the layout (a count past its end, a listener index out of range) is
// refused whole.
func TestDecodeMalformedPayload(t *testing.T) {
	s := sample()
	s.Allocations[1].Listener = 3
	if _, err := Encode(s); err == nil {
		t.Fatal("Encode took an allocation of a listener that does not exist")
	}
	good, _ := Encode(sample())
	// Make the allocation count huge and reseal.
	b := append([]byte(nil), good...)
	off := headerLen + 8 + 2 + len("stunner.l7mp.io") + 32 + 2 + 2 + len("udp") + 7 + 2
	binary.BigEndian.PutUint32(b[off:], 1<<30)
	if got, err := Decode(reseal(b, Version)); !errors.Is(err, ErrMalformed) || got != nil {
		t.Errorf("huge allocation count: %v, %v; want ErrMalformed", got, err)
	}
	// An association's allocation must be a TURN-DTLS one.
	s = sample()
	s.Associations[0].Allocations[0].FiveTuple.Proto = turn.ProtoUDP
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); !errors.Is(err, ErrMalformed) || got != nil {
		t.Errorf("association with a UDP allocation: %v, %v; want ErrMalformed", got, err)
	}
	s = sample()
	s.Associations[1].Listener = 1
	if _, err := Encode(s); err == nil {
		t.Error("Encode took an association of a TURN-DTLS listener that does not exist")
	}
}

func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			if s != nil {
				t.Fatal("Decode returned a snapshot with an error")
			}
			return
		}
		// What decodes encodes to the same bytes.
		again, err := Encode(s)
		if err != nil {
			t.Fatalf("Encode of a decoded snapshot: %v", err)
		}
		if string(again) != string(b) {
			t.Fatal("decode-encode changed the snapshot")
		}
	})
}
