package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// Defaults applied by SetDefaults.
const (
	DefaultLogLevel      = "info"
	DefaultRealm         = "stunner.l7mp.io"
	DefaultListenAddress = "0.0.0.0"
	DefaultRelayAddress  = "127.0.0.1"
	// The default relay range sits below Linux's ephemeral range
	// (32768-60999) so relay ports never collide with outgoing connections.
	DefaultRelayMinPort  = 20000
	DefaultRelayMaxPort  = 29999
	DefaultMaxLifetime   = 600 // seconds
	DefaultNonceLifetime = 600 // seconds

	// NoLimit in a quota or throttle field of Limits turns it off.
	NoLimit = -1
	// DefaultAllocationsPerUser is the per-USERNAME quota with ephemeral
	// auth, where a username is one issued credential: a leaked one holds
	// at most this many relay ports. (Static auth shares one username
	// among every client, so it gets NoLimit and the per-IP and total
	// quotas.)
	DefaultAllocationsPerUser = 100
	// DefaultAllocationsPerIP is the per-client-address quota. A WebRTC
	// client holds 1-6 allocations (a publisher and a subscriber
	// PeerConnection, each gathering UDP, TCP and TLS relay candidates), so
	// this admits 30-200 clients behind one NAT, while one address takes
	// at most 2% of the default 10,000 relay ports.
	DefaultAllocationsPerIP = 200
	// DefaultAuthFailureBurst and DefaultAuthFailureRate (per second) are
	// the failed-authentication throttle per client address. A legitimate
	// client fails only when its nonce goes stale or its credential is
	// wrong, a few times at most; a password guesser gets 10 tries, then 2
	// a second (7,200 an hour), instead of tens of thousands a second.
	DefaultAuthFailureBurst = 10
	DefaultAuthFailureRate  = 2

	// An unauthenticated connection costs the server a socket and a
	// goroutine; 30 s of silence is long for a client that has not
	// allocated yet, and short enough that idle connections do not pile up.
	DefaultConnectionIdleTimeout = 30 // seconds
	// A frame of up to 64 KiB takes well under a second on any link a
	// TURN client uses; 5 s bounds how long a half-sent frame holds its
	// read buffer (docs/security.md) with room for a congested client.
	DefaultPartialFrameTimeout = 5 // seconds
	// 500 connections from one address leaves room for an office behind
	// one NAT (a WebRTC client opens one or two TURN-TCP/TLS connections)
	// while twenty addresses are needed to fill a listener.
	DefaultConnectionsPerIP = 500
	// 10,000 idle connections cost tens of megabytes (docs/security.md).
	DefaultMaxConnections = 10000
)

// Load reads the config file at path and returns Parse(data, getenv).
// Errors, whether from reading, decoding, placeholders or validation, are
// wrapped with the path.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err) // *PathError already names the path
	}
	c, err := Parse(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return c, nil
}

// Parse turns a config document, as the operator renders it or a person
// writes it, into the config ternd runs. ternd (file and ConfigMap) and the
// fuzz target parse with it; the operator checks what it renders with it,
// or, rendering with a render.Memo, with ParseJSON on the JSON the YAML is
// made from (the same decoding, the same checks).
//
// In order, it decodes data as YAML or JSON (JSON is YAML), strictly: an
// unknown or duplicate field is an error that names it. It replaces the
// address placeholders of package placeholder with the values getenv
// returns for POD_IP, NODE_IP and POD_IPS; getenv is os.Getenv in a pod,
// and nil means no variable is set, so a placeholder is then an error. It applies
// SetDefaults, after the placeholders so that a relay address defaulted from
// a listener's gets the real IP, and then Validate.
//
// It returns the config, or nil and the error: a decoding or placeholder
// error prefixed "parse config: ", or Validate's error unwrapped (a join of
// *FieldError).
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	var c Config
	if err := CheckUTF8(data); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if err := c.Prepare(getenv); err != nil {
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			return nil, err
		}
		return nil, fmt.Errorf("parse config: %w", err)
	}
	return &c, nil
}

// ParseJSON is Parse for a JSON document written by a program, such as the
// operator's json.Marshal of a config it rendered: it decodes data with
// encoding/json instead of converting YAML to JSON first, which is most of
// Parse's CPU time, and then does what Parse does (UTF-8 check, strict
// decoding that refuses unknown fields, placeholders, SetDefaults,
// Validate), returning the same config and the same errors (a decoding
// error prefixed "parse config: ", or Validate's join of *FieldError).
// Unlike Parse it does not refuse a duplicate key (encoding/json keeps the
// last), which json.Marshal never writes; documents people write go
// through Parse. Trailing data after the object is an error.
func ParseJSON(data []byte, getenv func(string) string) (*Config, error) {
	var c Config
	if err := CheckUTF8(data); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if d.More() {
		return nil, errors.New("parse config: data after the JSON object")
	}
	if err := c.Prepare(getenv); err != nil {
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			return nil, err
		}
		return nil, fmt.Errorf("parse config: %w", err)
	}
	return &c, nil
}

// Prepare is the rest of Parse after decoding, for a config built as a
// typed value: by an adapter of another format (ternd's readers of
// stunnerd's config file and turn:// URIs, dataplane/stunnerdconf) or by a
// program (bench, soak). It replaces the address placeholders with the
// values getenv returns (as Parse does; nil getenv means an empty
// environment), applies SetDefaults and then Validate, so that a typed
// config meets exactly the checks a document does. It returns a
// placeholder error naming the field ("relay.address: $(POD_IP) needs the
// environment variable POD_IP") or Validate's error (a join of
// *FieldError); on error c may be partly defaulted.
func (c *Config) Prepare(getenv func(string) string) error {
	if err := c.expandPlaceholders(getenv); err != nil {
		return err
	}
	c.SetDefaults()
	return c.Validate()
}

// SetDefaults fills unset fields with their defaults and normalizes aliases:
// auth types to AuthStatic/AuthEphemeral and listener protocols to the
// constants of package protocol. It never fails; values it cannot normalize
// are left for Validate to report. Version is required and is not
// defaulted.
func (c *Config) SetDefaults() {
	if c.Admin.LogLevel == "" {
		c.Admin.LogLevel = DefaultLogLevel
	}
	if c.Auth.Realm == "" {
		c.Auth.Realm = DefaultRealm
	}
	if c.Auth.Type == "" {
		c.Auth.Type = AuthStatic
	}
	if t, err := NormalizeAuthType(c.Auth.Type); err == nil {
		c.Auth.Type = t
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if l.Address == "" {
			l.Address = DefaultListenAddress
		}
		if p, ok := protocol.Normalize(string(l.Protocol)); ok {
			l.Protocol = p
		}
	}
	if c.Relay.Address == "" {
		c.Relay.Address = DefaultRelayAddress
		// Relay on the listener's IP so replies leave from the address clients
		// already reach; a wildcard cannot be put in XOR-RELAYED-ADDRESS.
		if len(c.Listeners) > 0 {
			if a, err := netip.ParseAddr(c.Listeners[0].Address); err == nil && !a.IsUnspecified() {
				c.Relay.Address = c.Listeners[0].Address
			}
		}
	}
	c.Relay.MinPort = cmp.Or(c.Relay.MinPort, DefaultRelayMinPort)
	c.Relay.MaxPort = cmp.Or(c.Relay.MaxPort, DefaultRelayMaxPort)
	c.Limits.MaxLifetime = cmp.Or(c.Limits.MaxLifetime, DefaultMaxLifetime)
	c.Limits.NonceLifetime = cmp.Or(c.Limits.NonceLifetime, DefaultNonceLifetime)
	if c.Limits.AllocationsPerUser == 0 {
		c.Limits.AllocationsPerUser = DefaultAllocationsPerUser
		if c.Auth.Type == AuthStatic {
			c.Limits.AllocationsPerUser = NoLimit
		}
	}
	c.Limits.AllocationsPerIP = cmp.Or(c.Limits.AllocationsPerIP, DefaultAllocationsPerIP)
	c.Limits.AuthFailureBurst = cmp.Or(c.Limits.AuthFailureBurst, DefaultAuthFailureBurst)
	c.Limits.AuthFailureRate = cmp.Or(c.Limits.AuthFailureRate, DefaultAuthFailureRate)
	c.Limits.ConnectionIdleTimeout = cmp.Or(c.Limits.ConnectionIdleTimeout, DefaultConnectionIdleTimeout)
	c.Limits.ConnectionsPerIP = cmp.Or(c.Limits.ConnectionsPerIP, DefaultConnectionsPerIP)
	c.Limits.MaxConnections = cmp.Or(c.Limits.MaxConnections, DefaultMaxConnections)
	// An unset engine stays unset (it means None), so that configs without
	// offload render and compare as before.
	if e, err := offloadmode.NormalizeEngine(c.Offload.Engine); err == nil && c.Offload.Engine != "" {
		c.Offload.Engine = e
	}
	if a, err := offloadmode.NormalizeAttach(c.Offload.Attach); err == nil && c.Offload.Attach != "" {
		c.Offload.Attach = a
	}
}

// NormalizeAuthType maps an auth type, case-insensitively, to AuthStatic
// ("static", "plaintext") or AuthEphemeral ("ephemeral", "longterm",
// "timewindowed"), the spellings STUNner's API accepts. Any other string is
// an error.
func NormalizeAuthType(s string) (string, error) {
	switch strings.ToLower(s) {
	case "static", "plaintext":
		return AuthStatic, nil
	case "ephemeral", "longterm", "timewindowed":
		return AuthEphemeral, nil
	}
	return "", fmt.Errorf("unknown auth type %q: want static (or plaintext) or ephemeral (or longterm, timewindowed)", s)
}
