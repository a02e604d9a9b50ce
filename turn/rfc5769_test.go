package turn

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/pion/stun/v2"
)

// The test vectors of RFC 5769, as hex.
const (
	rfc5769Request = "000100582112a442b7e7a701bc34d686fa87dfae" +
		"802200105354554e207465737420636c69656e74" + // SOFTWARE
		"002400046e0001ff" + // PRIORITY
		"80290008932ff9b151263b36" + // ICE-CONTROLLED
		"000600096576746a3a68367659202020" + // USERNAME "evtj:h6vY"
		"000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a2" + // MESSAGE-INTEGRITY
		"80280004e57a3bcf" // FINGERPRINT
	rfc5769IPv4Response = "0101003c2112a442b7e7a701bc34d686fa87dfae" +
		"8022000b7465737420766563746f7220" +
		"002000080001a147e112a643" +
		"000800142b91f599fd9e90c38c7489f92af9ba53f06be7d7" +
		"80280004c07d4c96"
	rfc5769IPv6Response = "010100482112a442b7e7a701bc34d686fa87dfae" +
		"8022000b7465737420766563746f7220" +
		"002000140002a1470113a9faa5d3f179bc25f4b5bed2b9d9" +
		"00080014a382954e4be67bf11784c97c8292c275bfe3ed41" +
		"80280004c8fb0b4c"
	rfc5769LongTerm = "000100602112a44278ad3433c6ad72c029da412e" +
		"00060012e3839ee38388e383aae38383e382afe382b90000" + // USERNAME "マトリックス"
		"0015001c662f2f3439396b393534643" + "64f4c33346f4c394653547679363473" + "41" + // NONCE
		"0014000b6578616d706c652e6f726700" + // REALM "example.org"
		"00080014f67024656dd64a3e02b8e0712e85c9a28ca89666" // MESSAGE-INTEGRITY
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRFC5769Request feeds the sample request (§2.1) to the engine as a
// Binding from a client and checks the answer.
func TestRFC5769Request(t *testing.T) {
	f := newFixture(t)
	pkt := unhex(t, rfc5769Request)
	m := f.send(clientTuple, pkt)
	if code(m) != 0 || m.Type != stun.BindingSuccess {
		t.Fatalf("answer %v, code %d", m.Type, code(m))
	}
	if !bytes.Equal(m.TransactionID[:], pkt[8:20]) {
		t.Error("transaction ID not echoed")
	}
	if got := xorGet(t, m, stun.AttrXORMappedAddress); got != clientAddr {
		t.Errorf("XOR-MAPPED-ADDRESS = %v", got)
	}
	if err := stun.Fingerprint.Check(m); err != nil {
		t.Errorf("FINGERPRINT: %v", err)
	}
	// One flipped bit breaks the FINGERPRINT: the engine drops the packet.
	bad := append([]byte(nil), pkt...)
	bad[30] ^= 1
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, bad, &r)
	if r.Kind != Drop || r.Drop != DropMalformed {
		t.Errorf("request with a bad FINGERPRINT: kind %d drop %v", r.Kind, r.Drop)
	}
}

// TestRFC5769Addresses decodes the XOR-MAPPED-ADDRESS of the sample
// responses (§2.2, §2.3) with the engine's codec and encodes them back.
func TestRFC5769Addresses(t *testing.T) {
	for _, tc := range []struct {
		resp string
		want netip.AddrPort
	}{
		{rfc5769IPv4Response, netip.MustParseAddrPort("192.0.2.1:32853")},
		{rfc5769IPv6Response, netip.MustParseAddrPort("[2001:db8:1234:5678:11:2233:4455:6677]:32853")},
	} {
		raw := unhex(t, tc.resp)
		m := &stun.Message{Raw: raw}
		if err := m.Decode(); err != nil {
			t.Fatal(err)
		}
		v, _ := m.Get(stun.AttrXORMappedAddress)
		got, ok := parseXORAddr(v, m.TransactionID[:])
		if !ok || got != tc.want {
			t.Errorf("decoded %v, want %v", got, tc.want)
		}
		enc := make([]byte, 20)
		n := putXORAddr(enc, tc.want, m.TransactionID[:])
		if !bytes.Equal(enc[:n], v) {
			t.Errorf("encoded %x, want %x", enc[:n], v)
		}
		if err := stun.NewShortTermIntegrity("VOkJxbRl1RmTxUk/WvJxBt").Check(m); err != nil {
			t.Errorf("vector integrity: %v", err)
		}
	}
}

// TestRFC5769LongTerm checks the long-term credential vector (§2.4) with
// the key the engine's Authenticator derives, and that the engine refuses the
// vector's nonce, which it did not issue, with 438 and a fresh one.
func TestRFC5769LongTerm(t *testing.T) {
	raw := unhex(t, rfc5769LongTerm)
	m := &stun.Message{Raw: raw}
	if err := m.Decode(); err != nil {
		t.Fatal(err)
	}
	auth := StaticAuth{Username: "マトリックス", Password: "TheMatrIX"}
	key, ok := auth.Key("マトリックス", "example.org", t0)
	if !ok {
		t.Fatal("static user not found")
	}
	if err := stun.MessageIntegrity(key).Check(m); err != nil {
		t.Fatalf("RFC 5769 §2.4 integrity with the engine's key: %v", err)
	}
	wrong, _ := StaticAuth{Username: "マトリックス", Password: "TheMatrix"}.Key("マトリックス", "example.org", t0)
	if stun.MessageIntegrity(wrong).Check(m) == nil {
		t.Fatal("wrong password passed the integrity check")
	}

	// The same attributes on an Allocate: the engine does not know the nonce.
	f := newFixture(t, func(c *Config) { c.Realm = "example.org"; c.Auth = auth })
	var nonce stun.Nonce
	_ = nonce.GetFrom(m)
	c := &client{f: f, ft: clientTuple, user: "マトリックス", pass: "TheMatrIX", nonce: string(nonce)}
	resp := f.send(clientTuple, c.signed(stun.MethodAllocate, transportUDP()))
	if code(resp) != 438 {
		t.Fatalf("foreign nonce: code %d, want 438", code(resp))
	}
	var fresh stun.Nonce
	if fresh.GetFrom(resp) != nil || string(fresh) == string(nonce) {
		t.Fatal("438 without a fresh NONCE")
	}
}
