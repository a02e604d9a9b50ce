package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tern-gw/tern/dataplane/config/endpoint"
	"github.com/tern-gw/tern/dataplane/config/loglevel"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// maxRealmBytes is RFC 8489 §14.9's limit on REALM: fewer than 128
// characters and at most 763 bytes.
const maxRealmBytes = 763

// FieldError is one validation failure. Field is the path of the offending
// field as spelled in the config, e.g. "listeners[1].port".
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "<field>: <msg>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Validate checks c, which should have had SetDefaults applied (Validate
// wants the normalized auth type and protocol spellings). It returns nil, or
// errors.Join of one *FieldError per failed rule, so every problem is
// reported at once; use errors.As to get at them.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}

	if c.Version != Version {
		bad("version", "must be %q, got %q", Version, c.Version)
	}

	// admin
	if _, err := loglevel.Parse(c.Admin.LogLevel); err != nil {
		bad("admin.logLevel", "%v", err)
	}
	for _, f := range []struct{ name, addr string }{
		{"admin.metricsAddress", c.Admin.MetricsAddress},
		{"admin.healthAddress", c.Admin.HealthAddress},
	} {
		if f.addr != "" && !endpoint.ValidHostPort(f.addr) {
			bad(f.name, "must be host:port with a numeric port, got %q", f.addr)
		}
	}

	// auth
	if c.Auth.Type != AuthStatic && c.Auth.Type != AuthEphemeral {
		bad("auth.type", "must be %q or %q, got %q", AuthStatic, AuthEphemeral, c.Auth.Type)
	}
	switch {
	case c.Auth.Realm == "":
		bad("auth.realm", "must not be empty")
	case len(c.Auth.Realm) > maxRealmBytes:
		bad("auth.realm", "must be at most %d bytes (RFC 8489), got %d", maxRealmBytes, len(c.Auth.Realm))
	case !utf8.ValidString(c.Auth.Realm):
		bad("auth.realm", "must be valid UTF-8")
	case strings.IndexFunc(c.Auth.Realm, unicode.IsControl) >= 0:
		bad("auth.realm", "must not contain control characters")
	}
	// Check the credentials of the type meant, even if spelled as an alias.
	// In STUN mode no TURN request is authenticated, so none are needed
	// (STUNner's stunMode makes them optional too).
	t, _ := NormalizeAuthType(c.Auth.Type)
	if c.STUNMode {
		t = ""
	}
	switch t {
	case AuthStatic:
		if c.Auth.Username == "" {
			bad("auth.username", "required for static auth")
		}
		checkSecret(bad, "password", c.Auth.Password, c.Auth.PasswordFile, "static")
	case AuthEphemeral:
		checkSecret(bad, "sharedSecret", c.Auth.SharedSecret, c.Auth.SharedSecretFile, "ephemeral")
	}
	// Credentials are UTF-8 strings (RFC 8489 §14.3 USERNAME, §9.2.2 the
	// OpaqueString password), and a config travels as JSON, which cannot
	// carry other bytes: a password with a byte that is not UTF-8 would
	// come back from the ConfigMap as U+FFFD and never match again. The
	// value itself is never part of the error.
	for _, f := range []struct{ name, v string }{
		{"username", c.Auth.Username}, {"password", c.Auth.Password}, {"sharedSecret", c.Auth.SharedSecret},
	} {
		if !utf8.ValidString(f.v) {
			bad("auth."+f.name, "must be valid UTF-8 (credentials are UTF-8 strings, RFC 8489 §14.3, and JSON carries no other bytes)")
		}
	}

	// clusters, before listeners so routes can be checked against them
	clusters := map[string]int{}
	for i, cl := range c.Clusters {
		p := fmt.Sprintf("clusters[%d]", i)
		if cl.Name == "" {
			bad(p+".name", "must not be empty")
		} else if j, dup := clusters[cl.Name]; dup {
			bad(p+".name", "duplicate name %q (also clusters[%d])", cl.Name, j)
		} else {
			clusters[cl.Name] = i
		}
		if !validClusterType(cl.Type) {
			bad(p+".type", "must be %s or %s, got %q", ClusterStatic, ClusterStrictDNS, cl.Type)
		}
		for k, ep := range cl.Endpoints {
			if cl.IsStrictDNS() {
				if !endpoint.ValidHostname(ep) {
					bad(fmt.Sprintf("%s.endpoints[%d]", p, k), "must be a host name in a %s cluster, got %q", ClusterStrictDNS, ep)
				}
				continue
			}
			if _, err := endpoint.ParsePrefix(ep); err != nil {
				bad(fmt.Sprintf("%s.endpoints[%d]", p, k), "must be an IP address or CIDR prefix, got %q", ep)
			}
		}
		checkPortRange(bad, p, cl.MinPort, cl.MaxPort, 0)
	}

	// listeners
	if len(c.Listeners) == 0 {
		bad("listeners", "at least one listener is required")
	}
	listeners := map[string]int{}
	for i, l := range c.Listeners {
		p := fmt.Sprintf("listeners[%d]", i)
		if l.Name == "" {
			bad(p+".name", "must not be empty")
		} else if j, dup := listeners[l.Name]; dup {
			bad(p+".name", "duplicate name %q (also listeners[%d])", l.Name, j)
		} else {
			listeners[l.Name] = i
		}
		switch info, ok := l.Protocol.Info(); {
		case !ok:
			bad(p+".protocol", "must be one of %s, got %q",
				protocol.Canonical(), l.Protocol)
		case info.Secure:
			if l.Cert == "" {
				bad(p+".cert", "required for %s", l.Protocol)
			}
			if l.Key == "" {
				bad(p+".key", "required for %s", l.Protocol)
			}
		}
		if _, err := netip.ParseAddr(l.Address); err != nil {
			bad(p+".address", "must be an IP address, got %q", l.Address)
		}
		if l.Port < 1 || l.Port > 65535 {
			bad(p+".port", "must be 1-65535, got %d", l.Port)
		}
		if l.PublicAddress != "" {
			if _, err := netip.ParseAddr(l.PublicAddress); err != nil {
				bad(p+".publicAddress", "must be an IP address, got %q", l.PublicAddress)
			}
		}
		if l.PublicPort < 0 || l.PublicPort > 65535 {
			bad(p+".publicPort", "must be 0-65535, got %d", l.PublicPort)
		}
		for k, r := range l.Routes {
			if _, ok := clusters[r]; !ok {
				bad(fmt.Sprintf("%s.routes[%d]", p, k), "no cluster named %q", r)
			}
		}
		if u := l.Upstream; u != nil {
			if l.Protocol != protocol.TURNTLS {
				bad(p+".upstream", "only a %s listener can have an upstream, not %s", protocol.TURNTLS, l.Protocol)
			}
			if !endpoint.ValidHostPort(u.Address) {
				bad(p+".upstream.address", "must be host:port with a numeric port, got %q", u.Address)
			}
			if u.ClientHelloTimeout < 0 {
				bad(p+".upstream.clientHelloTimeout", "must be 0 (the default) or more seconds, got %d", u.ClientHelloTimeout)
			}
			for k, n := range u.TURNServerNames {
				if n == "" || strings.ContainsAny(n, " /:") {
					bad(fmt.Sprintf("%s.upstream.turnServerNames[%d]", p, k), "must be a host name, got %q", n)
				}
			}
		}
	}

	// relay
	if _, err := netip.ParseAddr(c.Relay.Address); err != nil {
		bad("relay.address", "must be an IP address, got %q", c.Relay.Address)
	}
	if c.Relay.PublicAddress != "" {
		if _, err := netip.ParseAddr(c.Relay.PublicAddress); err != nil {
			bad("relay.publicAddress", "must be an IP address, got %q", c.Relay.PublicAddress)
		}
	}
	checkPortRange(bad, "relay", c.Relay.MinPort, c.Relay.MaxPort, 1)
	for _, node := range slices.Sorted(maps.Keys(c.Relay.NodePublicAddresses)) {
		p := fmt.Sprintf("relay.nodePublicAddresses[%q]", node)
		if node == "" {
			bad(p, "must name a node")
		}
		if _, err := netip.ParseAddr(c.Relay.NodePublicAddresses[node]); err != nil {
			bad(p, "must be an IP address, got %q", c.Relay.NodePublicAddresses[node])
		}
	}
	seen := map[string]string{c.Relay.Address: "relay.address"}
	for i, ra := range c.Relay.ExtraAddresses {
		p := fmt.Sprintf("relay.extraAddresses[%d]", i)
		if _, err := netip.ParseAddr(ra.Address); err != nil {
			bad(p+".address", "must be an IP address, got %q", ra.Address)
		} else if first, dup := seen[ra.Address]; dup {
			bad(p+".address", "%s is already %s", ra.Address, first)
		} else {
			seen[ra.Address] = p + ".address"
		}
		if ra.PublicAddress != "" {
			if _, err := netip.ParseAddr(ra.PublicAddress); err != nil {
				bad(p+".publicAddress", "must be an IP address, got %q", ra.PublicAddress)
			}
		}
	}

	// limits
	for _, f := range []struct {
		name string
		v    int
	}{
		{"limits.maxLifetime", c.Limits.MaxLifetime},
		{"limits.nonceLifetime", c.Limits.NonceLifetime},
		{"limits.connectionIdleTimeout", c.Limits.ConnectionIdleTimeout},
		{"limits.partialFrameTimeout", c.Limits.PartialFrameTimeout},
		{"limits.connectionsPerIP", c.Limits.ConnectionsPerIP},
		{"limits.maxConnections", c.Limits.MaxConnections},
	} {
		if f.v < 0 {
			bad(f.name, "must not be negative, got %d", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"limits.allocationsPerUser", c.Limits.AllocationsPerUser},
		{"limits.allocationsPerIP", c.Limits.AllocationsPerIP},
		{"limits.maxAllocations", c.Limits.MaxAllocations},
		{"limits.stateBudgetMiB", c.Limits.StateBudgetMiB},
		{"limits.authFailureBurst", c.Limits.AuthFailureBurst},
		{"limits.authFailureRate", c.Limits.AuthFailureRate},
	} {
		if f.v < NoLimit {
			bad(f.name, "must be -1 (no limit), 0 (the default) or positive, got %d", f.v)
		}
	}

	if v := c.Limits.AllocationImbalancePercent; v < 0 || v > 1000 {
		bad("limits.allocationImbalancePercent", "must be 0 (off) to 1000, got %d", v)
	}

	// offload
	if e, err := offloadmode.NormalizeEngine(c.Offload.Engine); err != nil {
		bad("offload.engine", "%v", err)
	} else if e != c.Offload.Engine && c.Offload.Engine != "" {
		bad("offload.engine", "must be spelled %q (SetDefaults normalizes it), got %q", e, c.Offload.Engine)
	}
	if a, err := offloadmode.NormalizeAttach(c.Offload.Attach); err != nil {
		bad("offload.attach", "%v", err)
	} else if a != c.Offload.Attach && c.Offload.Attach != "" {
		bad("offload.attach", "must be spelled %q (SetDefaults normalizes it), got %q", a, c.Offload.Attach)
	}
	seenIf := map[string]int{}
	for i, name := range c.Offload.Interfaces {
		p := fmt.Sprintf("offload.interfaces[%d]", i)
		if j, dup := seenIf[name]; dup {
			bad(p, "%q is already offload.interfaces[%d]", name, j)
		}
		seenIf[name] = i
		if !validIfName(name) {
			bad(p, "must be an interface name (1-15 bytes, no '/', ':' or white space), got %q", name)
		}
	}

	checkAlternates(bad, c.Alternates)

	return errors.Join(errs...)
}

// checkAlternates reports alternates that are not host:port with a host
// name or IP address and a port 0-65535, and repeated ones.
func checkAlternates(bad func(string, string, ...any), alts []string) {
	seen := map[string]int{}
	for i, a := range alts {
		p := fmt.Sprintf("alternates[%d]", i)
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || !endpoint.ValidHostPort(a) {
			bad(p, "must be host:port with a host name or IP address and a numeric port 0-65535, got %q", a)
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			if ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() {
				bad(p, "must name a unicast address without a zone, got %q", a)
				continue
			}
			host = ip.Unmap().String()
		} else if !endpoint.ValidHostname(host) {
			bad(p, "must be host:port with a host name or IP address, got %q", a)
			continue
		}
		key := strings.ToLower(net.JoinHostPort(host, port))
		if j, dup := seen[key]; dup {
			bad(p, "%q is already alternates[%d]", a, j)
			continue
		}
		seen[key] = i
	}
}

// checkSecret reports a credential given neither inline (auth.<name>) nor
// as a file (auth.<name>File), or given both.
func checkSecret(bad func(string, string, ...any), name, inline, file, typ string) {
	switch {
	case inline == "" && file == "":
		bad("auth."+name, "required for %s auth (or auth.%sFile)", typ, name)
	case inline != "" && file != "":
		bad("auth."+name+"File", "set either auth.%s or auth.%sFile, not both", name, name)
	}
}

// checkPortRange reports prefix.minPort and prefix.maxPort outside lo-65535,
// and min > max. A cluster's 0/0 means "all ports", so the order is only
// checked when either bound is set.
func checkPortRange(bad func(string, string, ...any), prefix string, lo, hi, minAllowed int) {
	ok := true
	for _, f := range []struct {
		name string
		v    int
	}{{"minPort", lo}, {"maxPort", hi}} {
		if f.v < minAllowed || f.v > 65535 {
			bad(prefix+"."+f.name, "must be %d-65535, got %d", minAllowed, f.v)
			ok = false
		}
	}
	if ok && (lo != 0 || hi != 0) && lo > hi {
		bad(prefix+".minPort", "must not exceed maxPort (%d), got %d", hi, lo)
	}
}

// Prefixes returns the cluster's endpoints as masked prefixes: a bare IPv4
// address becomes a /32, a bare IPv6 address a /128, and an IPv4-mapped
// IPv6 address or prefix (::ffff:10.0.0.5, ::ffff:10.0.0.0/120) its IPv4
// form, since peers are matched as IPv4. It fails on the first
// endpoint that is neither an IP address nor a CIDR prefix, and so on every
// endpoint of a STRICT_DNS cluster, whose host names must be resolved.
func (cl Cluster) Prefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cl.Endpoints))
	for _, ep := range cl.Endpoints {
		p, err := endpoint.ParsePrefix(ep)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cl.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// validIfName reports whether s can name a Linux network interface
// (IFNAMSIZ-1 bytes, as dev_valid_name checks).
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) || r < 0x20 })
}
