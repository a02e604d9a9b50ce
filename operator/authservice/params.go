package authservice

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// DefaultTTL is the lifetime of ephemeral credentials, in seconds, when
	// the GatewayConfig sets no authLifetime: one day, STUNner's auth
	// service's default. It is also the longest ttl such a Gateway's
	// credentials get (see Handler).
	DefaultTTL = 86400
	// maxUser is the longest user id, in bytes. A STUN USERNAME must be
	// shorter than 513 bytes (RFC 8489 §14.3), and the expiry and colon
	// take up to 20 more.
	maxUser = 256
	// maxName bounds namespace, gateway, listener and public-addr values,
	// in bytes: a DNS subdomain's length.
	maxName = 253
)

// request is a parsed query of / or /ice. The zero value of each field means
// the parameter was not given (or given empty).
type request struct {
	user                         string // user id for ephemeral usernames
	ttl                          int64  // seconds, uncapped
	policy                       string // iceTransportPolicy: all, public or relay; /ice only
	namespace, gateway, listener string
	publicAddr                   string // overrides the Gateways' addresses
}

// paramError is a bad query parameter; the handler answers 400 with it.
type paramError struct {
	param, msg string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

// parseRequest reads the query parameters of STUNner's auth service API:
// service (required on /, optional on /ice, and "turn" when given),
// username, ttl, iceTransportPolicy (ice only; also spelled
// icetransportpolicy), namespace, gateway (needs namespace), listener
// (needs gateway) and public-addr. key (an API key in the API, unused by
// STUNner) and unknown parameters are ignored; an empty value counts as
// absent. A parameter given twice, or a value out of its domain, is a
// *paramError naming the parameter.
func parseRequest(q url.Values, ice bool) (request, error) {
	var r request
	get := func(names ...string) (string, error) {
		var val string
		n := 0
		for _, name := range names {
			for _, v := range q[name] {
				n++
				val = v
			}
		}
		if n > 1 {
			return "", badParam(names[0], "given %d times, want at most one", n)
		}
		return val, nil
	}

	service, err := get("service")
	if err != nil {
		return r, err
	}
	switch {
	case service == "" && !ice:
		return r, badParam("service", `required, want "turn"`)
	case service != "" && !strings.EqualFold(service, "turn"):
		return r, badParam("service", `want "turn", got %q`, clip(service))
	}

	if r.user, err = get("username"); err != nil {
		return r, err
	}
	if len(r.user) > maxUser {
		return r, badParam("username", "%d bytes, want at most %d", len(r.user), maxUser)
	}
	if !utf8.ValidString(r.user) || strings.IndexFunc(r.user, unicode.IsControl) >= 0 {
		return r, badParam("username", "want UTF-8 text without control characters")
	}

	ttl, err := get("ttl")
	if err != nil {
		return r, err
	}
	if ttl != "" {
		// Any whole number of seconds from 1 is accepted, as STUNner's
		// service accepts any: the handler caps it at the Gateway's
		// lifetime. One too big for an int64 is capped as well.
		n, err := strconv.ParseInt(ttl, 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			err = nil
		}
		if err != nil || n < 1 || strings.Trim(ttl, "0123456789") != "" {
			return r, badParam("ttl", "want a whole number of seconds from 1, got %q", clip(ttl))
		}
		r.ttl = n
	}

	if ice {
		if r.policy, err = get("iceTransportPolicy", "icetransportpolicy"); err != nil {
			return r, err
		}
		switch r.policy {
		case "":
			r.policy = "all"
		case "all", "public", "relay":
		default:
			return r, badParam("iceTransportPolicy", `want "all", "public" or "relay", got %q`, clip(r.policy))
		}
	}

	for _, p := range []struct {
		name string
		dst  *string
	}{{"namespace", &r.namespace}, {"gateway", &r.gateway}, {"listener", &r.listener}, {"public-addr", &r.publicAddr}} {
		if *p.dst, err = get(p.name); err != nil {
			return r, err
		}
		if len(*p.dst) > maxName {
			return r, badParam(p.name, "%d bytes, want at most %d", len(*p.dst), maxName)
		}
	}
	if r.gateway != "" && r.namespace == "" {
		return r, badParam("gateway", "needs namespace")
	}
	if r.listener != "" && r.gateway == "" {
		return r, badParam("listener", "needs gateway and namespace")
	}
	if r.publicAddr != "" && !validHost(r.publicAddr) {
		return r, badParam("public-addr", "want an IP address or a DNS name, got %q", clip(r.publicAddr))
	}
	return r, nil
}

// validHost reports whether s is an IP address (without a zone) or a DNS
// name: what may stand as the host of a TURN URI (RFC 7065 §3.1).
func validHost(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Zone() == ""
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// clip shortens a value quoted back in an error to 64 bytes.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// CheckPublicAddr returns an error unless s is empty, an IP address or a
// DNS name: what Options.PublicAddr may hold.
func CheckPublicAddr(s string) error {
	if s != "" && (len(s) > maxName || !validHost(s)) {
		return fmt.Errorf("want an IP address or a DNS name, got %q", clip(s))
	}
	return nil
}
