package protocol

import "testing"

func TestTable(t *testing.T) {
	for _, tc := range []struct {
		in               string
		want             Protocol
		transport        Transport
		secure, datagram bool
		scheme           string
		port             int
	}{
		{"TURN-UDP", TURNUDP, TransportUDP, false, true, "turn", 3478},
		{"tcp", TURNTCP, TransportTCP, false, false, "turn", 3478},
		{"Turn-Tls", TURNTLS, TransportTCP, true, false, "turns", 5349},
		{"DTLS", TURNDTLS, TransportUDP, true, true, "turns", 5349},
	} {
		p, ok := Normalize(tc.in)
		if !ok || p != tc.want {
			t.Fatalf("Normalize(%q) = %q, %v; want %q", tc.in, p, ok, tc.want)
		}
		i, ok := p.Info()
		if !ok || !p.Valid() || i.Protocol != p {
			t.Fatalf("%s: Info = %+v, %v", p, i, ok)
		}
		if p.Transport() != tc.transport || p.Secure() != tc.secure || p.Datagram() != tc.datagram ||
			i.URIScheme() != tc.scheme || i.DefaultPort != tc.port {
			t.Errorf("%s: got %+v scheme %s, want transport %s secure %v datagram %v scheme %s port %d",
				p, i, i.URIScheme(), tc.transport, tc.secure, tc.datagram, tc.scheme, tc.port)
		}
	}
	for _, bad := range []string{"", "sctp", "TURN-SCTP", "turn-udp "} {
		if p, ok := Normalize(bad); ok || p != "" {
			t.Errorf("Normalize(%q) = %q, %v; want not a protocol", bad, p, ok)
		}
		if Protocol(bad).Valid() || Protocol(bad).Transport() != "" || Protocol(bad).Secure() {
			t.Errorf("Protocol(%q) has properties", bad)
		}
	}
	if got := Protocol("udp").Valid(); got {
		t.Error("an alias is not a canonical protocol: Normalize first")
	}
	if got, want := Names(), "TURN-UDP, TURN-TCP, TURN-TLS or TURN-DTLS (or UDP, TCP, TLS, DTLS)"; got != want {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if got, want := Canonical(), "TURN-UDP, TURN-TCP, TURN-TLS, TURN-DTLS"; got != want {
		t.Errorf("Canonical() = %q, want %q", got, want)
	}
	if len(All()) != 4 {
		t.Errorf("All() has %d rows", len(All()))
	}
}
