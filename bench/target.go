package bench

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tern-gw/tern/bench/turnclient"
)

// Kind says how the harness talks to a target.
type Kind string

const (
	// KindTURN is a TURN server over UDP with static long-term credentials.
	KindTURN Kind = "turn"
	// KindRaw is the raw forwarder (bench/forwarder): no TURN, the ceiling.
	KindRaw Kind = "raw"
)

// Target is one server under test.
type Target struct {
	// Name labels results, e.g. "ternd", "coturn", "pion", "forwarder".
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Addr is the client-facing UDP address.
	Addr netip.AddrPort `json:"addr"`
	// TCP, TLS and DTLS are the TURN-TCP, TURN-TLS and TURN-DTLS
	// addresses, when the server listens on them (the flows tests).
	TCP  netip.AddrPort `json:"tcp,omitzero"`
	TLS  netip.AddrPort `json:"tls,omitzero"`
	DTLS netip.AddrPort `json:"dtls,omitzero"`
	// Creds are the static credentials (KindTURN only).
	Creds turnclient.Credentials `json:"-"`
	// PID is the server process whose CPU time and RSS are read from
	// /proc; 0 means not measured.
	PID int `json:"pid,omitempty"`
	// Description says what the target is (version, threads, flags).
	Description string `json:"description,omitempty"`
}

// AddrFor is the client-facing address of transport p, ok false when the
// target does not listen on it.
func (t Target) AddrFor(p turnclient.Proto) (netip.AddrPort, bool) {
	var a netip.AddrPort
	switch p {
	case turnclient.UDP:
		a = t.Addr
	case turnclient.TCP:
		a = t.TCP
	case turnclient.TLS:
		a = t.TLS
	case turnclient.DTLS:
		a = t.DTLS
	}
	return a, a.IsValid()
}

// ParseTarget parses NAME=ADDR[,kind=turn|raw][,pid=PID][,user=U][,pass=P]
// [,tcp=ADDR][,tls=ADDR][,dtls=ADDR],
// e.g. "coturn=127.0.0.1:3478,pid=4242". User and password default to
// user/pass, the credentials of the bench configs.
func ParseTarget(s string) (Target, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return Target{}, fmt.Errorf("target %q: want NAME=ADDR[,kind=..][,pid=..][,user=..][,pass=..]", s)
	}
	fields := strings.Split(rest, ",")
	addr, err := netip.ParseAddrPort(fields[0])
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %v", s, err)
	}
	t := Target{Name: name, Kind: KindTURN, Addr: addr, Creds: turnclient.Credentials{Username: "user", Password: "pass"}}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "kind":
			if v != string(KindTURN) && v != string(KindRaw) {
				return Target{}, fmt.Errorf("target %q: kind must be turn or raw", s)
			}
			t.Kind = Kind(v)
		case "pid":
			if t.PID, err = strconv.Atoi(v); err != nil || t.PID <= 0 {
				return Target{}, fmt.Errorf("target %q: bad pid %q", s, v)
			}
		case "tcp", "tls", "dtls":
			a, err := netip.ParseAddrPort(v)
			if err != nil {
				return Target{}, fmt.Errorf("target %q: %s: %v", s, k, err)
			}
			switch k {
			case "tcp":
				t.TCP = a
			case "tls":
				t.TLS = a
			default:
				t.DTLS = a
			}
		case "user":
			t.Creds.Username = v
		case "pass":
			t.Creds.Password = v
		default:
			return Target{}, fmt.Errorf("target %q: unknown option %q", s, k)
		}
	}
	return t, nil
}
