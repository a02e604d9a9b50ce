package placeholder

import (
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "fd00::7"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		fn            func(string, string, func(string) string) (string, error)
		in, want, err string
	}{
		{Expand, PodIP, "10.244.0.7", ""},
		{Expand, NodeIP, "fd00::7", ""},
		{Expand, "10.0.0.1", "10.0.0.1", ""},
		{Expand, "x" + PodIP, "x" + PodIP, ""}, // only whole values
		{Expand, PodIPs, PodIPs, ""},           // relay.address only: PodIPList
		{Expand, "$(HOME)", "$(HOME)", ""},
		{ExpandHost, PodIP + ":8086", "10.244.0.7:8086", ""},
		{ExpandHost, NodeIP + ":8080", "[fd00::7]:8080", ""},
		{ExpandHost, "0.0.0.0:8086", "0.0.0.0:8086", ""},
		{ExpandHost, PodIP, PodIP, ""}, // not host:port: left for validation
		{ExpandHost, "x" + PodIP + ":80", "x" + PodIP + ":80", ""},
	} {
		got, err := tc.fn("f", tc.in, getenv)
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	none := func(string) string { return "" }
	for _, in := range []string{PodIP, NodeIP} {
		if _, err := Expand("relay.address", in, none); err == nil || !strings.HasPrefix(err.Error(), "relay.address: "+in+" needs the environment variable") {
			t.Errorf("Expand(%q) with no environment: %v", in, err)
		}
	}
	if _, err := ExpandHost("admin.healthAddress", PodIP+":8086", none); err == nil || !strings.HasPrefix(err.Error(), "admin.healthAddress: ") {
		t.Errorf("ExpandHost with no environment: %v", err)
	}
}

func TestPodIPList(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"POD_IPS": "10.0.0.7,fd00::7", "POD_IP": "10.0.0.9"}, []string{"10.0.0.7", "fd00::7"}},
		{map[string]string{"POD_IPS": " 10.0.0.7 ,, 10.0.0.7,fd00::7 "}, []string{"10.0.0.7", "fd00::7"}},
		{map[string]string{"POD_IPS": ",", "POD_IP": " 10.0.0.9 "}, []string{"10.0.0.9"}},
		{map[string]string{}, nil},
	} {
		got, err := PodIPList("relay.address", func(k string) string { return tc.env[k] })
		if tc.want == nil {
			if err == nil || !strings.Contains(err.Error(), "relay.address: $(POD_IPS) needs the environment variable POD_IPS or POD_IP") {
				t.Errorf("%v: got %q, %v; want an error", tc.env, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}
