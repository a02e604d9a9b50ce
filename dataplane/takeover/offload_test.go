package takeover

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleOffload is sample with an offload section: tcx on one interface
// (a link descriptor), clsact on another, and two counter slots.
func sampleOffload() *Snapshot {
	s := sample()
	s.Offload = &Offload{
		Mode: "Auto", Attach: "Auto", Interfaces: []string{"eth0"},
		Listeners: []netip.AddrPort{netip.MustParseAddrPort("10.0.1.1:3478")},
		Relays:    []netip.Addr{netip.MustParseAddr("10.0.2.1"), netip.MustParseAddr("fd00::1")},
		Maps:      []string{"c2p", "p2c"},
		Programs:  []string{"tern_tc"},
		Attachments: []OffloadAttachment{
			{Interface: "eth0", Index: 2, Hook: "TC", Attach: "tcx", Egress: "fib", Why: "forwarding_on", Reason: "tcx attached", Link: true},
			{Interface: "eth1", Index: 3, Hook: "TC", Attach: "clsact", Egress: "same_interface", Why: "single_interface", Reason: "clsact asked for", OwnsQdisc: true},
		},
		Slots: []OffloadSlot{{Listener: "udp", Cluster: 0, ClientToPeerPackets: 10, ClientToPeerBytes: 1600, PeerToClientPackets: 9, PeerToClientBytes: 1440},
			{Listener: "udp", Cluster: 1}},
		Stats: []uint64{1, 0, 0, 0, 2, 0, 0},
	}
	return s
}

func TestOffloadRoundTrip(t *testing.T) {
	s := sampleOffload()
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.Offload, got.Offload, cmpAddrs...); diff != "" {
		t.Errorf("decoded offload section differs (-encoded +decoded):\n%s", diff)
	}
	if n, sockets := s.FDs(), sample().FDs(); n != sockets+2+1+1 {
		t.Errorf("FDs() = %d, want %d sockets, 2 maps, 1 program and 1 link", n, sockets)
	}
}

// TestOffloadMalformed: flags and a presence byte the layout does not
// know are refused whole.
func TestOffloadMalformed(t *testing.T) {
	good, err := Encode(sampleOffload())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	// The presence byte: the first payload byte where a snapshot with an
	// offload section differs from one without.
	at := headerLen
	for at < len(plain) && plain[at] == good[at] {
		at++
	}
	for name, mutate := range map[string]func(b []byte){
		"presence byte 2": func(b []byte) { b[at] = 2 },
		"unknown flags": func(b []byte) {
			// The first attachment's flags byte follows its reason.
			i := bytes.Index(b, []byte("tcx attached")) + len("tcx attached")
			b[i] = 0x80
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			if name == "presence byte 2" {
				b = append([]byte(nil), plain...)
			}
			mutate(b)
			if s, err := Decode(reseal(b, Version)); !errors.Is(err, ErrMalformed) || s != nil {
				t.Errorf("Decode = %v, %v; want nil and ErrMalformed", s, err)
			}
		})
	}
}
