package bench

import (
	"net/netip"
	"testing"

	"github.com/tern-gw/tern/bench/turnclient"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
		bad  bool
	}{
		{in: "ternd=127.0.0.1:3478", want: Target{Name: "ternd", Kind: KindTURN, Addr: netip.MustParseAddrPort("127.0.0.1:3478")}},
		{in: "fwd=127.0.0.1:9,kind=raw,pid=12", want: Target{Name: "fwd", Kind: KindRaw, Addr: netip.MustParseAddrPort("127.0.0.1:9"), PID: 12}},
		{in: "c=127.0.0.1:1,user=a,pass=b", want: Target{Name: "c", Kind: KindTURN, Addr: netip.MustParseAddrPort("127.0.0.1:1")}},
		{in: "s=127.0.0.1:3478,tcp=127.0.0.1:3478,tls=127.0.0.1:5349,dtls=127.0.0.1:5349", want: Target{Name: "s", Kind: KindTURN,
			Addr: netip.MustParseAddrPort("127.0.0.1:3478"), TCP: netip.MustParseAddrPort("127.0.0.1:3478"),
			TLS: netip.MustParseAddrPort("127.0.0.1:5349"), DTLS: netip.MustParseAddrPort("127.0.0.1:5349")}},
		{in: "x=127.0.0.1:1,tls=nowhere", bad: true},
		{in: "127.0.0.1:3478", bad: true},
		{in: "x=nowhere", bad: true},
		{in: "x=127.0.0.1:1,kind=tcp", bad: true},
		{in: "x=127.0.0.1:1,pid=-3", bad: true},
		{in: "x=127.0.0.1:1,color=red", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTarget(tc.in)
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error %v", err, tc.bad)
			}
			if tc.bad {
				return
			}
			wantCreds := turnclient.Credentials{Username: "user", Password: "pass"}
			if tc.want.Name == "c" {
				wantCreds = turnclient.Credentials{Username: "a", Password: "b"}
			}
			if got.Creds != wantCreds {
				t.Fatalf("credentials %+v, want %+v", got.Creds, wantCreds)
			}
			got.Creds = tc.want.Creds
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
