package render

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

func TestDecodeUpstream(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		want    *config.TLSUpstream
		wantErr string
	}{
		{`"web.site.svc:443"`, &config.TLSUpstream{Address: "web.site.svc:443"}, ""},
		{`{"address": "10.0.0.1:8443", "turnServerNames": ["turn.example.com"], "clientHelloTimeout": 2}`,
			&config.TLSUpstream{Address: "10.0.0.1:8443", TURNServerNames: []string{"turn.example.com"}, ClientHelloTimeout: 2}, ""},
		{`"web.site.svc"`, nil, "address must be host:port"},
		{`"web.site.svc:https"`, nil, "numeric port"},
		{`{"address": "web:443", "upstream": "x"}`, nil, `unknown field "upstream"`},
		{`{"address": "web:443", "clientHelloTimeout": -1}`, nil, "clientHelloTimeout"},
		{`{"address": "web:443", "turnServerNames": ["a b"]}`, nil, "not a host name"},
		{`443`, nil, "want \"host:port\""},
	} {
		got, err := decodeUpstream(json.RawMessage(tc.raw))
		if tc.wantErr != "" {
			if !strings.Contains(err, tc.wantErr) || got != nil {
				t.Errorf("%s: got %+v, %q; want an error with %q", tc.raw, got, err, tc.wantErr)
			}
			continue
		}
		if err != "" || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %q; want %+v", tc.raw, got, err, tc.want)
		}
	}
}
