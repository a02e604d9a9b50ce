package config

import (
	"strings"
	"testing"
)

func TestStrictDNSClusterValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster Cluster
		want    string // "" for valid
	}{
		{"static default", Cluster{Name: "c", Endpoints: []string{"10.0.0.1"}}, ""},
		{"static explicit", Cluster{Name: "c", Type: "static", Endpoints: []string{"10.0.0.0/8"}}, ""},
		{"strict dns", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{"media.example.com", "svc.ns.svc.cluster.local.", "localhost"}}, ""},
		{"strict dns lower case", Cluster{Name: "c", Type: "strict_dns", Endpoints: []string{"a-b.example"}}, ""},
		{"unknown type", Cluster{Name: "c", Type: "LOGICAL_DNS", Endpoints: []string{"a.example"}}, `clusters[0].type: must be STATIC or STRICT_DNS, got "LOGICAL_DNS"`},
		{"hostname in static", Cluster{Name: "c", Endpoints: []string{"a.example"}}, `clusters[0].endpoints[0]: must be an IP address or CIDR prefix`},
		{"prefix in strict dns", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{"10.0.0.0/8"}}, `clusters[0].endpoints[0]: must be a host name in a STRICT_DNS cluster, got "10.0.0.0/8"`},
		{"host:port in strict dns", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{"a.example:3478"}}, `clusters[0].endpoints[0]: must be a host name`},
		{"bad label", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{"-a.example"}}, `clusters[0].endpoints[0]: must be a host name`},
		{"empty label", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{"a..example"}}, `clusters[0].endpoints[0]: must be a host name`},
		{"long label", Cluster{Name: "c", Type: ClusterStrictDNS, Endpoints: []string{strings.Repeat("a", 64) + ".example"}}, `clusters[0].endpoints[0]: must be a host name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.cluster.Name = c.Clusters[0].Name
			c.Clusters[0] = tc.cluster
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestStrictDNSClusterParse(t *testing.T) {
	doc := `
version: v1
auth: {type: static, username: u, password: p}
listeners: [{name: l, protocol: TURN-UDP, address: 127.0.0.1, port: 3478, routes: [media]}]
clusters: [{name: media, type: STRICT_DNS, endpoints: [media.example.com]}]
`
	cfg, err := Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Clusters[0].IsStrictDNS() {
		t.Errorf("cluster %+v: not STRICT_DNS", cfg.Clusters[0])
	}
	if _, err := cfg.Clusters[0].Prefixes(); err == nil {
		t.Error("Prefixes of a STRICT_DNS cluster: no error")
	}
}
