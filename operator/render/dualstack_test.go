package render

import (
	"reflect"
	"testing"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/placeholder"
)

func TestDualStackRelay(t *testing.T) {
	addrs := func(vs ...string) *gwapiv1.Gateway {
		gw := &gwapiv1.Gateway{}
		for _, v := range vs {
			gw.Spec.Addresses = append(gw.Spec.Addresses, gwapiv1.GatewaySpecAddress{Value: v})
		}
		return gw
	}
	cases := []struct {
		name                    string
		gw                      *gwapiv1.Gateway
		standalone, hostNetwork bool
		want                    config.Relay
	}{
		{"pod", addrs(), false, false, config.Relay{Address: placeholder.PodIPs}},
		{"host network keeps the node IP", addrs(), false, true, config.Relay{Address: placeholder.NodeIP}},
		{"standalone, IPv4 first", addrs("::1", "127.0.0.1", "127.0.0.2"), true, false,
			config.Relay{Address: "127.0.0.1", ExtraAddresses: []config.RelayAddress{{Address: "::1"}}}},
		{"standalone, IPv6 only", addrs("::1"), true, false, config.Relay{Address: "::1"}},
		{"standalone, no address", addrs("media.example.com"), true, false, config.Relay{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r config.Relay
			if tc.hostNetwork {
				r.Address = placeholder.NodeIP
			}
			dualStackRelay(&r, tc.gw, tc.standalone, tc.hostNetwork)
			if !reflect.DeepEqual(r, tc.want) {
				t.Errorf("relay %+v, want %+v", r, tc.want)
			}
		})
	}
}
