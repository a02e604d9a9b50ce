package turn

import (
	"testing"

	"github.com/pion/stun/v2"
)

// TestUnauthenticatedResponsesAreSmall bounds what an unauthenticated
// request, which anyone can send with a spoofed source, gets back: a 401
// carries only ERROR-CODE (no reason phrase), REALM and NONCE (RFC 8489
// §9.2.4), no SOFTWARE, so the reflection factor of a bare 20-byte
// request stays below 4 with the default realm.
func TestUnauthenticatedResponsesAreSmall(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Software = "tern" })
	req := raw(t, stun.MethodAllocate)
	if len(req) != 20 {
		t.Fatalf("request is %d bytes", len(req))
	}
	m := f.send(clientTuple, req)
	if code(m) != 401 {
		t.Fatalf("code %d", code(m))
	}
	var types []stun.AttrType
	for _, a := range m.Attributes {
		types = append(types, a.Type)
	}
	want := []stun.AttrType{stun.AttrErrorCode, stun.AttrRealm, stun.AttrNonce}
	if len(types) != len(want) || types[0] != want[0] || types[1] != want[1] || types[2] != want[2] {
		t.Errorf("401 attributes %v, want %v", types, want)
	}
	if got := float64(len(m.Raw)) / float64(len(req)); len(m.Raw) > 76 || got >= 4 {
		t.Errorf("401 is %d bytes for a %d-byte request (%.1fx), want at most 76 (3.8x)", len(m.Raw), len(req), got)
	}
	t.Logf("20-byte Allocate -> %d-byte 401 (%.1fx)", len(m.Raw), float64(len(m.Raw))/20)

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
