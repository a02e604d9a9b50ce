package render

import (
	"strings"

	"github.com/tern-gw/tern/dataplane/config/loglevel"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// stunnerLevels maps STUNner's level names that the dataplane's parser may
// not know to the nearest it does: TRACE is more verbose than DEBUG, and
// DISABLE silences a scope, which for the `all` scope ERROR comes closest to.
var stunnerLevels = map[string]string{"trace": "DEBUG", "disable": "ERROR"}

// logLevel returns the admin.logLevel to render for the GatewayConfig's
// logLevel s and true, or an error message and false. A level the
// dataplane parses is kept as written. Otherwise STUNner's TRACE and
// DISABLE are translated with a warning, so that a GatewayConfig carried
// over from STUNner with `all:TRACE` still renders its Gateways instead of
// leaving them all not Accepted.
func (r *renderer) logLevel(gc *stnrv1.GatewayConfig, s string) (string, bool) {
	_, err := loglevel.Parse(s)
	if err == nil {
		return s, true
	}
	entries := strings.Split(s, ",")
	changed := false
	for i, e := range entries {
		scope, name, scoped := strings.Cut(strings.TrimSpace(e), ":")
		if !scoped {
			name = scope
		}
		to, ok := stunnerLevels[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			continue
		}
		changed = true
		if scoped {
			entries[i] = scope + ":" + to
		} else {
			entries[i] = to
		}
	}
	if !changed {
		return err.Error(), false
	}
	out := strings.Join(entries, ",")
	if _, err2 := loglevel.Parse(out); err2 != nil {
		return err.Error(), false
	}
	r.problems.warnf(gatewayConfigRef(gc), "spec.logLevel", "%q rendered as %q: the dataplane has no TRACE or DISABLE level", s, out)
	return out, true
}
