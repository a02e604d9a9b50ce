package admin

import (
	"strconv"
	"strings"

	"github.com/tern-gw/tern/dataplane/config"
)

// StatusPath is where the health address serves the dataplane's status in
// the JSON shape of STUNner's stunnerd (its StunnerStatus), which
// `stunnerctl status` port-forwards to and decodes.
const StatusPath = "/status"

// The Status strings of stunnerd: READY while it takes new allocations,
// NOT-READY before a listener runs, TERMINATING once a SIGTERM started the
// drain (ternd's Drain). /ready answers 200 exactly when Status is
// StatusReady.
const (
	StatusReady       = "READY"
	StatusNotReady    = "NOT-READY"
	StatusTerminating = "TERMINATING"
)

// redacted stands in for a credential's value in Status.Auth, as
// stunnerd's own summary of an auth config writes it.
const redacted = "<SECRET>"

// Status is the dataplane's state as stunnerd's /status reports it:
// the field names and JSON keys of STUNner's v1 StunnerStatus, so that
// STUNner's tools decode it. Unlike stunnerd's, it carries no credential:
// Auth.Credentials names the configured keys with redacted values, and
// listeners carry no certificate or key.
type Status struct {
	// Version is the STUNner API version, "v1".
	Version string      `json:"version"`
	Admin   StatusAdmin `json:"admin"`
	Auth    StatusAuth  `json:"auth"`
	// Listeners and Clusters are those of the config in force, in its
	// order; never null.
	Listeners []ListenerStatus `json:"listeners"`
	Clusters  []ClusterStatus  `json:"clusters"`
	// AllocationCount is the number of live allocations.
	AllocationCount int `json:"allocationCount"`
	// Status is StatusReady, StatusNotReady or StatusTerminating.
	Status string `json:"status"`
}

// StatusAdmin is STUNner's AdminStatus: the admin settings in force.
type StatusAdmin struct {
	Name     string `json:"name,omitempty"`
	LogLevel string `json:"loglevel,omitempty"`
	// MetricsEndpoint and HealthCheckEndpoint are URLs, as stunnerd's
	// config writes them ("http://address:port/metrics").
	MetricsEndpoint     string `json:"metrics_endpoint,omitempty"`
	HealthCheckEndpoint string `json:"healthcheck_endpoint,omitempty"`
	// Quota is limits.allocationsPerUser in decimal, STUNner's user
	// quota: "0" when there is none (config.NoLimit), as stunnerd says.
	Quota string `json:"quota,omitempty"`
	// Offload is the kernel fast path as "<engine>[<interfaces>]", the
	// form stunnerd writes: the hook attached (None when off) and the
	// interfaces it runs on, "all" when none are listed.
	Offload string `json:"offload,omitempty"`
}

// StatusAuth is STUNner's AuthStatus (its AuthConfig) with the values of
// Credentials redacted.
type StatusAuth struct {
	Type  string `json:"type,omitempty"`
	Realm string `json:"realm,omitempty"`
	// Credentials maps the keys STUNner names ("username" and "password"
	// for static, "secret" for ephemeral) to "<SECRET>".
	Credentials map[string]string `json:"credentials"`
}

// ListenerStatus is STUNner's ListenerStatus: a listener's config, under
// STUNner's names, and its traffic.
type ListenerStatus struct {
	Name          string   `json:"name,omitempty"`
	Protocol      string   `json:"protocol,omitempty"`
	PublicAddress string   `json:"public_address,omitempty"`
	PublicPort    int      `json:"public_port,omitempty"`
	Address       string   `json:"address,omitempty"`
	Port          int      `json:"port,omitempty"`
	Routes        []string `json:"routes,omitempty"`
	Stats         DirStats `json:"stats"`
}

// ClusterStatus is STUNner's ClusterStatus: a cluster's config, under
// STUNner's names, and its traffic.
type ClusterStatus struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	// Protocol is "UDP": a cluster's peers are reached over UDP.
	Protocol  string   `json:"protocol,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
	Stats     DirStats `json:"stats"`
}

// DirStats are a listener's or cluster's counters by direction (STUNner's
// OffloadDirStat). For a listener Rx is what its clients sent and Tx what
// it sent them; for a cluster Rx is what its peers sent and Tx what was
// relayed to them. Tern counts both the sockets' and the kernel fast
// path's packets here, where stunnerd counts the fast path's alone.
type DirStats struct {
	Rx DirStat `json:"rx"`
	Tx DirStat `json:"tx"`
}

// DirStat counts packets and bytes (UDP payload or TCP/TLS stream bytes)
// in one direction.
type DirStat struct {
	Pkts  uint64 `json:"pkts"`
	Bytes uint64 `json:"bytes"`
}

// StatusInput is the run-time state a Status is made of besides the
// config.
type StatusInput struct {
	Allocations int
	// Ready and Draining are what /ready reports: Ready is that a
	// listener runs, Draining that a drain started.
	Ready, Draining bool
	// Offload is the kernel hook attached (None, XDP or TC) and the
	// interfaces it runs on.
	Offload           string
	OffloadInterfaces []string
	// Listeners and Clusters are the counters by name; a name missing
	// counts zero.
	Listeners, Clusters map[string]DirStats
}

// NewStatus returns the Status of cfg with in's state. It copies what it
// takes from cfg, never a credential.
func NewStatus(cfg *config.Config, in StatusInput) Status {
	st := Status{
		Version: "v1",
		Admin: StatusAdmin{
			Name:     cfg.Admin.Name,
			LogLevel: cfg.Admin.LogLevel,
			Quota:    strconv.Itoa(max(cfg.Limits.AllocationsPerUser, 0)),
			Offload:  offloadString(in.Offload, in.OffloadInterfaces),
		},
		Auth:            StatusAuth{Type: cfg.Auth.Type, Realm: cfg.Auth.Realm, Credentials: credentialKeys(cfg.Auth)},
		Listeners:       make([]ListenerStatus, 0, len(cfg.Listeners)),
		Clusters:        make([]ClusterStatus, 0, len(cfg.Clusters)),
		AllocationCount: in.Allocations,
		Status:          statusString(in.Ready, in.Draining),
	}
	if a := cfg.Admin.MetricsAddress; a != "" {
		st.Admin.MetricsEndpoint = "http://" + a + "/metrics"
	}
	if a := cfg.Admin.HealthAddress; a != "" {
		st.Admin.HealthCheckEndpoint = "http://" + a
	}
	for _, l := range cfg.Listeners {
		st.Listeners = append(st.Listeners, ListenerStatus{
			Name: l.Name, Protocol: string(l.Protocol),
			PublicAddress: l.PublicAddress, PublicPort: l.PublicPort,
			Address: l.Address, Port: l.Port,
			Routes: append([]string(nil), l.Routes...),
			Stats:  in.Listeners[l.Name],
		})
	}
	for _, c := range cfg.Clusters {
		typ := strings.ToUpper(c.Type)
		if typ == "" {
			typ = config.ClusterStatic
		}
		st.Clusters = append(st.Clusters, ClusterStatus{
			Name: c.Name, Type: typ, Protocol: "UDP",
			Endpoints: append([]string(nil), c.Endpoints...),
			Stats:     in.Clusters[c.Name],
		})
	}
	return st
}

// statusString is stunnerd's status string for /ready's state.
func statusString(ready, draining bool) string {
	switch {
	case draining:
		return StatusTerminating
	case ready:
		return StatusReady
	default:
		return StatusNotReady
	}
}

// credentialKeys are the credential keys of a, by STUNner's names, each
// with a redacted value: what is configured shows, never what it is. A
// credential read from a file counts as configured.
func credentialKeys(a config.Auth) map[string]string {
	m := map[string]string{}
	if a.Username != "" {
		m["username"] = redacted
	}
	if a.Password != "" || a.PasswordFile != "" {
		m["password"] = redacted
	}
	if a.SharedSecret != "" || a.SharedSecretFile != "" {
		m["secret"] = redacted
	}
	return m
}

// offloadString writes the offload state as stunnerd does:
// "<engine>[<interfaces>]", with "all" for no interface list.
func offloadString(engine string, ifaces []string) string {
	if engine == "" {
		engine = "None"
	}
	list := "all"
	if engine != "None" && len(ifaces) > 0 {
		list = strings.Join(ifaces, ",")
	}
	return engine + "[" + list + "]"
}
