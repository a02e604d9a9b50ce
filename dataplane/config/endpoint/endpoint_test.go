package endpoint

import (
	"strings"
	"testing"
)

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.5":            "10.0.0.5/32",
		"10.0.0.77/24":        "10.0.0.0/24",
		"2001:db8::1":         "2001:db8::1/128",
		"2001:db8::ff/64":     "2001:db8::/64",
		"::ffff:10.0.0.5":     "10.0.0.5/32",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::ffff:0:0/95":       "::fffe:0:0/95", // wider than the mapped block: stays IPv6
	} {
		got, err := ParsePrefix(in)
		if err != nil || got.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a.example", "10.0.0.0/33", "fe80::1%eth0", "10.0.0.1:80", "10.0.0.0/"} {
		if got, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) = %v, want error", in, got)
		}
	}
}

func TestValidHostname(t *testing.T) {
	for in, want := range map[string]bool{
		"media.example.com": true, "svc.ns.svc.cluster.local.": true, "localhost": true,
		"a-b.example": true, "_sip._udp.example": true, "A.EXAMPLE": true,
		strings.Repeat("a", 63) + ".example": true,
		"":                                   false, ".": false, "-a.example": false, "a-.example": false, "a..example": false,
		"a.example:3478": false, "10.0.0.0/8": false, "a b.example": false,
		strings.Repeat("a", 64) + ".example":           false,
		strings.Repeat(strings.Repeat("a", 60)+".", 5): false, // 305 bytes
	} {
		if got := ValidHostname(in); got != want {
			t.Errorf("ValidHostname(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestValidHostPort(t *testing.T) {
	for in, want := range map[string]bool{
		":9090": true, "0.0.0.0:9090": true, "[::1]:8086": true, "localhost:8086": true, "127.0.0.1:0": true,
		"": false, "9090": false, "127.0.0.1": false, ":http": false, ":65536": false, "[::1]": false,
	} {
		if got := ValidHostPort(in); got != want {
			t.Errorf("ValidHostPort(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzParsePrefix checks that ParsePrefix never panics and that what it
// accepts is a valid, masked prefix with no zone and never an IPv4-mapped
// address of /96 or longer (peers are matched unmapped), which parses back
// to itself. Seeds: testdata/fuzz/FuzzParsePrefix.
func FuzzParsePrefix(f *testing.F) {
	f.Add("10.0.0.0/24")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrefix(s)
		if err != nil {
			return
		}
		if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" || p.Addr().Is4In6() && p.Bits() >= 96 {
			t.Fatalf("ParsePrefix(%q) = %v: invalid, unmasked, zoned or IPv4-mapped", s, p)
		}
		if q, err := ParsePrefix(p.String()); err != nil || q != p {
			t.Fatalf("ParsePrefix(%q) = %v, but ParsePrefix(%q) = %v, %v", s, p, p.String(), q, err)
		}
	})
}
