package stunnerdconf

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/placeholder"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"sigs.k8s.io/yaml"
)

// This file reads stunnerd's own config file (STUNner's v1 API,
// "stunnerd.conf"). Field names follow STUNner's JSON tags; these types are
// Tern's own description of that format.

// File is stunnerd's config file.
type File struct {
	Version   string     `json:"version"`
	Admin     Admin      `json:"admin"`
	Auth      Auth       `json:"auth"`
	Listeners []Listener `json:"listeners,omitempty"`
	Clusters  []Cluster  `json:"clusters,omitempty"`
}

// Admin is stunnerd's admin section.
type Admin struct {
	Name     string `json:"name,omitempty"`
	LogLevel string `json:"loglevel,omitempty"`
	// MetricsEndpoint is "http://address:port/path".
	MetricsEndpoint string `json:"metrics_endpoint,omitempty"`
	// HealthCheckEndpoint is "http://address:port"; absent means stunnerd's
	// default http://:8086, empty disables health checks.
	HealthCheckEndpoint *string `json:"healthcheck_endpoint,omitempty"`
	// UserQuota caps the allocations of one username. Present, it has
	// stunnerd's meaning: N > 0 caps at N, 0 (or less, which stunnerd
	// reads as 0) is no cap. Absent, Tern's default applies.
	UserQuota         *int     `json:"user_quota,omitempty"`
	OffloadEngine     string   `json:"offload_engine,omitempty"`
	OffloadInterfaces []string `json:"offload_interfaces,omitempty"`
	LicenseConfig     *struct {
		Key  string `json:"key"`
		HMAC string `json:"hmac"`
	} `json:"license_config,omitempty"`
}

// Auth is stunnerd's auth section: credentials is a map with
// username and password (static) or secret (ephemeral).
type Auth struct {
	Type        string            `json:"type,omitempty"`
	Realm       string            `json:"realm,omitempty"`
	Credentials map[string]string `json:"credentials,omitempty"`
}

// Listener is one of stunnerd's listeners. Cert and Key are the
// base64-encoded PEM, not file names.
type Listener struct {
	Name       string   `json:"name,omitempty"`
	Protocol   string   `json:"protocol,omitempty"`
	PublicAddr string   `json:"public_address,omitempty"`
	PublicPort int      `json:"public_port,omitempty"`
	Addr       string   `json:"address,omitempty"`
	Port       int      `json:"port,omitempty"`
	Cert       string   `json:"cert,omitempty"`
	Key        string   `json:"key,omitempty"`
	Routes     []string `json:"routes,omitempty"`
}

// Cluster is one of stunnerd's clusters.
type Cluster struct {
	Name      string   `json:"name"`
	Type      string   `json:"type,omitempty"`
	Protocol  string   `json:"protocol,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
}

// stunnerd's defaults, where they differ from Tern's or Tern has none.
const (
	stunnerdDefaultPort       = 3478
	stunnerdDefaultHealthPort = 8086
	// stunnerdAddrEnv is the variable STUNner's pods set to the pod IP and
	// its configs name as "$STUNNER_ADDR".
	stunnerdAddrEnv         = "STUNNER_ADDR"
	stunnerdAddrPlaceholder = "$" + stunnerdAddrEnv
	stunnerdNodePlaceholder = "__node_address_placeholder"
)

// Options say how to convert what Tern's config has no field for.
type Options struct {
	// Getenv resolves $STUNNER_ADDR and Tern's placeholders; nil means an
	// empty environment.
	Getenv func(string) string
	// WriteTLS stores a listener's PEM certificate and key and returns the
	// file names for Tern's cert and key, which are paths; nil makes a
	// TURN-TLS or TURN-DTLS listener an error.
	WriteTLS func(listener string, cert, key []byte) (certPath, keyPath string, err error)
}

// Detect reports whether data looks like stunnerd's config rather than
// Tern's: it has a key only stunnerd's format has (snake_case admin and
// listener keys, auth.credentials, a cluster type or protocol). A document
// that has none of them reads the same in both formats, and Parse takes it.
func Detect(data []byte) bool {
	var m struct {
		Admin     map[string]any   `json:"admin"`
		Auth      map[string]any   `json:"auth"`
		Listeners []map[string]any `json:"listeners"`
		Clusters  []map[string]any `json:"clusters"`
	}
	if yaml.Unmarshal(data, &m) != nil {
		return false
	}
	has := func(obj map[string]any, keys ...string) bool {
		for _, k := range keys {
			if _, ok := obj[k]; ok {
				return true
			}
		}
		return false
	}
	if has(m.Admin, "loglevel", "metrics_endpoint", "healthcheck_endpoint", "user_quota", "offload_engine", "offload_interfaces", "license_config") ||
		has(m.Auth, "credentials") {
		return true
	}
	for _, l := range m.Listeners {
		if has(l, "public_address", "public_port") {
			return true
		}
	}
	for _, c := range m.Clusters {
		if has(c, "type", "protocol") {
			return true
		}
	}
	return false
}

// Parse turns stunnerd's config file into the config ternd runs: it
// decodes strictly (an unknown field is an error naming it), converts
// (Convert) to a typed config.Config, and readies that through the
// contract's config.Prepare: Tern's placeholders, defaults and validation,
// the steps config.Parse takes after decoding. notes say what was ignored or defaulted differently, for
// ternd to log; errors name the stunnerd field.
func Parse(data []byte, opts Options) (c *config.Config, notes []string, err error) {
	var s File
	if err := config.CheckUTF8(data); err != nil {
		return nil, nil, fmt.Errorf("parse stunnerd config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, nil, fmt.Errorf("parse stunnerd config: %w", err)
	}
	c, notes, err = s.Convert(opts)
	if err != nil {
		return nil, notes, err
	}
	if err := c.Prepare(opts.Getenv); err != nil {
		if !isFieldErrors(err) {
			err = fmt.Errorf("parse stunnerd config: %w", err)
		}
		return nil, notes, err
	}
	return c, notes, nil
}

// isFieldErrors reports whether err, from config.Prepare, is Validate's
// (which names the field itself) rather than a placeholder's.
func isFieldErrors(err error) bool {
	var fe *config.FieldError
	return errors.As(err, &fe)
}

// Convert maps s to Tern's config, without Tern's defaults or validation.
// Everything is converted that can be, and the errors, one *FieldError per
// field Tern cannot serve, are returned joined.
func (s *File) Convert(opts Options) (*config.Config, []string, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var (
		errs  []error
		notes []string
	)
	bad := func(field, format string, args ...any) {
		errs = append(errs, &config.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }

	c := &config.Config{Version: s.Version}

	// admin
	c.Admin.Name = s.Admin.Name
	c.Admin.LogLevel = s.Admin.LogLevel
	if s.Admin.MetricsEndpoint != "" {
		addr, path, err := endpointAddr(s.Admin.MetricsEndpoint, 0)
		if err != nil {
			bad("admin.metrics_endpoint", "%v", err)
		} else {
			c.Admin.MetricsAddress = addr
			if path != "" && path != "/" && path != "/metrics" {
				note("admin.metrics_endpoint: metrics are served on /metrics, not %s", path)
			}
		}
	}
	switch h := s.Admin.HealthCheckEndpoint; {
	case h == nil:
		// stunnerd serves health checks unless told not to, and Services
		// and probes rendered for it point at that port.
		c.Admin.HealthAddress = fmt.Sprintf(":%d", stunnerdDefaultHealthPort)
	case *h != "":
		addr, _, err := endpointAddr(*h, stunnerdDefaultHealthPort)
		if err != nil {
			bad("admin.healthcheck_endpoint", "%v", err)
		} else {
			c.Admin.HealthAddress = addr
		}
	}
	if q := s.Admin.UserQuota; q != nil {
		c.Limits.AllocationsPerUser = config.NoLimit
		if *q > 0 {
			c.Limits.AllocationsPerUser = *q
		}
	}
	if e := s.Admin.OffloadEngine; e != "" {
		if m, err := offloadmode.NormalizeEngine(e); err != nil {
			note("admin.offload_engine: %q ignored: %v", e, err)
		} else {
			// Kept even when None: ternd's own default is Auto.
			c.Offload.Engine = m
			if m != offloadmode.None {
				note("admin.offload_engine: %q read as offload.engine %s", e, m)
			}
		}
	}
	c.Offload.Interfaces = s.Admin.OffloadInterfaces
	if s.Admin.LicenseConfig != nil {
		note("admin.license_config ignored: Tern needs no license")
	}

	// auth
	c.Auth.Type = s.Auth.Type
	c.Auth.Realm = s.Auth.Realm
	for _, k := range slices.Sorted(maps.Keys(s.Auth.Credentials)) {
		v := s.Auth.Credentials[k]
		switch k {
		case "username":
			c.Auth.Username = v
		case "password":
			c.Auth.Password = v
		case "secret":
			c.Auth.SharedSecret = v
		default:
			note("auth.credentials.%s ignored: only username, password and secret are used", k)
		}
	}

	// listeners
	for i, l := range s.Listeners {
		f := fmt.Sprintf("listeners[%d]", i)
		tl := config.Listener{Name: l.Name, Protocol: protocol.Protocol(l.Protocol), Port: l.Port, PublicPort: l.PublicPort, Routes: l.Routes}
		if tl.Protocol == "" {
			tl.Protocol = protocol.TURNUDP
		}
		if tl.Port == 0 {
			tl.Port = stunnerdDefaultPort
		}
		tl.Address = stunnerdAddress(l.Addr, getenv)
		tl.PublicAddress = stunnerdAddress(l.PublicAddr, getenv)
		if l.Cert != "" || l.Key != "" {
			certPath, keyPath, err := stunnerdTLS(l, opts.WriteTLS)
			if err != nil {
				bad(f+".cert", "%v", err)
			}
			tl.Cert, tl.Key = certPath, keyPath
		}
		c.Listeners = append(c.Listeners, tl)
	}
	// stunnerd relays from the pod's address; so does Tern when told it.
	if a := getenv(stunnerdAddrEnv); a != "" {
		c.Relay.Address = a
	}

	// clusters
	for i, cl := range s.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		if p := cl.Protocol; p != "" && !strings.EqualFold(p, "udp") {
			bad(f+".protocol", "only UDP clusters are supported, got %q", p)
		}
		tc, err := stunnerdCluster(cl)
		if err != nil {
			bad(f+".type", "%v", err)
			continue
		}
		c.Clusters = append(c.Clusters, tc)
	}
	return c, notes, errors.Join(errs...)
}

// stunnerdCluster maps a cluster by its type: STATIC lists addresses,
// STRICT_DNS host names that the dataplane resolves and re-resolves.
func stunnerdCluster(cl Cluster) (config.Cluster, error) {
	switch strings.ToUpper(cl.Type) {
	case "", "STATIC":
		return config.Cluster{Name: cl.Name, Endpoints: cl.Endpoints}, nil
	case "STRICT_DNS":
		return config.Cluster{Name: cl.Name, Type: config.ClusterStrictDNS, Endpoints: cl.Endpoints}, nil
	}
	return config.Cluster{}, fmt.Errorf("unknown cluster type %q: want STATIC or STRICT_DNS", cl.Type)
}

// stunnerdAddress maps stunnerd's address placeholders: "$STUNNER_ADDR" is
// the pod IP, which STUNner's pods (and Tern's) put in STUNNER_ADDR and
// Tern's $(POD_IP) also names; "__node_address_placeholder" is the node IP.
func stunnerdAddress(a string, getenv func(string) string) string {
	switch a {
	case stunnerdAddrPlaceholder:
		if v := getenv(stunnerdAddrEnv); v != "" {
			return v
		}
		return placeholder.PodIP
	case stunnerdNodePlaceholder:
		return placeholder.NodeIP
	}
	return a
}

// stunnerdTLS decodes a listener's base64 PEM certificate and key and has
// write store them. stunnerd carries them inline; Tern reads files, which
// it also watches for renewals.
func stunnerdTLS(l Listener, write func(string, []byte, []byte) (string, string, error)) (string, string, error) {
	if l.Cert == "" || l.Key == "" {
		return "", "", errors.New("cert and key must both be set")
	}
	cert, err := base64.StdEncoding.DecodeString(l.Cert)
	if err != nil || !bytes.Contains(cert, []byte("-----BEGIN")) {
		return "", "", errors.New("cert must be a base64-encoded PEM certificate")
	}
	key, err := base64.StdEncoding.DecodeString(l.Key)
	if err != nil || !bytes.Contains(key, []byte("-----BEGIN")) {
		return "", "", errors.New("key must be a base64-encoded PEM private key")
	}
	if write == nil {
		return "", "", errors.New("inline certificates need a directory to write them to (ternd provides one)")
	}
	return write(l.Name, cert, key)
}

// endpointAddr turns stunnerd's "http://address:port/path" into Tern's
// host:port and the path. A missing port takes defPort; with defPort 0 it
// is an error.
func endpointAddr(s string, defPort int) (addr, path string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("invalid URL %q: %v", s, err)
	}
	if u.Scheme != "http" {
		return "", "", fmt.Errorf("%q: want http://address:port", s)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		if defPort == 0 {
			return "", "", fmt.Errorf("%q: no port", s)
		}
		port = strconv.Itoa(defPort)
	}
	return net.JoinHostPort(host, port), u.Path, nil
}
