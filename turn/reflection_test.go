package turn

import (
	"testing"

	"github.com/pion/stun/v2"
)

// TestUnauthenticatedResponsesAreSmall bounds what an unauthenticated
// request, which anyone can send with a spoofed source, gets back: a 401
// carries only ERROR-CODE (no reason phrase), REALM and a 12-character
// NONCE (RFC 8489 §9.2.4), no SOFTWARE, and FINGERPRINT only when the
// request had one. With the default realm (15 bytes) the 401 to pion/turn's
// 36-byte first Allocate (REQUESTED-TRANSPORT and FINGERPRINT) is 72 bytes,
// at most 2× the request (issue 22 item 10: 84 bytes, 2.3×, before); a
// longer realm adds its padded length.
func TestUnauthenticatedResponsesAreSmall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		realm   string
		attrs   []stun.Setter
		req     int // request bytes
		maxResp int // 401 bytes
	}{
		{"bare Allocate", testRealm, nil, 20, 64},
		{"REQUESTED-TRANSPORT", testRealm, []stun.Setter{transportUDP()}, 28, 64},
		{"pion/turn's first Allocate", testRealm, []stun.Setter{transportUDP(), stun.Fingerprint}, 36, 72},
		{"pion/turn's, 32-byte realm", "turn.media.eu-west-1.example.com", []stun.Setter{transportUDP(), stun.Fingerprint}, 36, 88},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Software = "tern"; c.Realm = tc.realm })
			req := raw(t, stun.MethodAllocate, tc.attrs...)
			if len(req) != tc.req {
				t.Fatalf("request is %d bytes, want %d", len(req), tc.req)
			}
			m := f.send(clientTuple, req)
			if code(m) != 401 {
				t.Fatalf("code %d", code(m))
			}
			var types []stun.AttrType
			for _, a := range m.Attributes {
				if a.Type != stun.AttrFingerprint {
					types = append(types, a.Type)
				}
			}
			want := []stun.AttrType{stun.AttrErrorCode, stun.AttrRealm, stun.AttrNonce}
			if len(types) != len(want) || types[0] != want[0] || types[1] != want[1] || types[2] != want[2] {
				t.Errorf("401 attributes %v, want %v", types, want)
			}
			if len(m.Raw) > tc.maxResp {
				t.Errorf("401 is %d bytes for a %d-byte request, want at most %d", len(m.Raw), len(req), tc.maxResp)
			}
			t.Logf("%d-byte Allocate, %d-byte realm -> %d-byte 401 (%.2fx)", len(req), len(tc.realm), len(m.Raw), float64(len(m.Raw))/float64(len(req)))
		})
	}
	f := newFixture(t, func(c *Config) { c.Software = "tern" })

	// A Binding request gets XOR-MAPPED-ADDRESS and nothing else.
	b := f.send(clientTuple, raw(t, stun.MethodBinding))
	if len(b.Raw) != 32 {
		t.Errorf("Binding response is %d bytes, want 32 (header and XOR-MAPPED-ADDRESS)", len(b.Raw))
	}
	t.Logf("20-byte Binding -> %d-byte response (%.1fx)", len(b.Raw), float64(len(b.Raw))/20)

	// An authenticated client still gets SOFTWARE and reason phrases.
	c := f.client("user", "pass")
	ok := c.do(stun.MethodAllocate, transportUDP())
	if !ok.Contains(stun.AttrSoftware) {
		t.Error("authenticated response lacks SOFTWARE")
	}
}
