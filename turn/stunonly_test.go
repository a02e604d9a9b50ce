package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// TestSTUNOnly: under Settings.STUNOnly (STUNner's stunMode) a Binding
// request is answered, and every TURN request, signed or not, gets a bare
// 403 with no challenge (no REALM or NONCE: there is nothing to
// authenticate for) and no allocation is made.
func TestSTUNOnly(t *testing.T) {
	stunOnly := func(c *Config) { c.STUNOnly = true }
	cases := []struct {
		name   string
		method stun.Method
		attrs  []stun.Setter
		signed bool
		want   int
	}{
		{"Binding", stun.MethodBinding, nil, false, 0},
		{"Binding with FINGERPRINT", stun.MethodBinding, []stun.Setter{stun.Fingerprint}, false, 0},
		{"Allocate", stun.MethodAllocate, []stun.Setter{transportUDP()}, false, 403},
		{"Allocate signed", stun.MethodAllocate, []stun.Setter{transportUDP()}, true, 403},
		{"Refresh", stun.MethodRefresh, nil, false, 403},
		{"Refresh signed", stun.MethodRefresh, []stun.Setter{lifetimeSetter(600)}, true, 403},
		{"CreatePermission", stun.MethodCreatePermission, []stun.Setter{peerAttr(peerAddr)}, true, 403},
		{"ChannelBind", stun.MethodChannelBind, []stun.Setter{channelNumber(0x4000), peerAttr(peerAddr)}, true, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, stunOnly)
			pkt := raw(t, tc.method, tc.attrs...)
			if tc.signed {
				c := f.client("user", "pass")
				c.nonce = "any"
				pkt = c.signed(tc.method, tc.attrs...)
			}
			m := f.send(clientTuple, pkt)
			if got := code(m); got != tc.want {
				t.Fatalf("code %d, want %d", got, tc.want)
			}
			if m.Type.Method != tc.method {
				t.Errorf("response method %v, want %v", m.Type.Method, tc.method)
			}
			if tc.want == 0 {
				if got := xorGet(t, m, stun.AttrXORMappedAddress); got != clientAddr {
					t.Errorf("XOR-MAPPED-ADDRESS = %v, want %v", got, clientAddr)
				}
				return
			}
			for _, at := range []stun.AttrType{stun.AttrRealm, stun.AttrNonce, stun.AttrMessageIntegrity} {
				if m.Contains(at) {
					t.Errorf("403 carries %v", at)
				}
			}
			// A bare ERROR-CODE: no bigger than a header and one 8-byte
			// attribute more than the request, far less than a 401 with
			// REALM and NONCE.
			if len(m.Raw) > max(len(pkt), stunHeaderSize+8) {
				t.Errorf("403 is %d bytes for a %d-byte request", len(m.Raw), len(pkt))
			}
			if f.e.Allocations() != 0 || len(f.relays.reqs) != 0 {
				t.Errorf("STUN-only engine allocated: %d allocations, %d relay requests", f.e.Allocations(), len(f.relays.reqs))
			}
		})
	}
}

// TestSTUNOnlyReconfigure: STUN-only mode changes in place. Turned on, an
// existing allocation's Refresh gets 403 (it runs out) and a new Allocate
// too; turned off, Allocate succeeds again.
func TestSTUNOnlyReconfigure(t *testing.T) {
	f, c, _ := allocated(t)
	s := *f.e.settings.Load()
	s.STUNOnly = true
	if err := f.e.Reconfigure(s); err != nil {
		t.Fatal(err)
	}
	if m := c.do(stun.MethodRefresh); code(m) != 403 {
		t.Fatalf("Refresh in STUN-only mode: code %d, want 403", code(m))
	}
	other := f.client("user", "pass")
	other.ft.Client = netip.MustParseAddrPort("203.0.113.50:1")
	if m := f.send(other.ft, raw(t, stun.MethodAllocate, transportUDP())); code(m) != 403 {
		t.Fatalf("Allocate in STUN-only mode: code %d, want 403", code(m))
	}
	s.STUNOnly = false
	if err := f.e.Reconfigure(s); err != nil {
		t.Fatal(err)
	}
	if m := other.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("Allocate after STUN-only mode is off: code %d, want success", code(m))
	}
}
