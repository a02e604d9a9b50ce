package render

import (
	"bytes"
	"encoding/json"
	"net"
	"sort"
	"strconv"
	"strings"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// AnnotationTLSUpstream shares TURN-TLS listeners' ports with an HTTPS
// server (config.TLSUpstream): a JSON map of listener name to the upstream,
// either "host:port" or an object with the dataplane config's fields,
// e.g. {"tls-listener": {"address": "ingress-nginx-controller.ingress-nginx.svc:443",
// "turnServerNames": ["turn.example.com"]}}. Tern's own key, read from the
// Gateway: an upstream belongs to one listener of one Gateway, which a
// GatewayConfig (shared by every Gateway of its class) cannot name, and an
// annotation leaves STUNner's CRDs as they are.
const AnnotationTLSUpstream = "tern-gw.io/tls-upstream"

// tlsUpstreams returns the upstreams AnnotationTLSUpstream gives gw's
// listeners, by listener name. Entries it cannot use (no such listener, not
// TURN-TLS, a bad address, timeout or name) are warned about and left out.
func (r *renderer) tlsUpstreams(gw *gwapiv1.Gateway, listeners []*listenerState) map[string]*config.TLSUpstream {
	v, ok := gw.Annotations[AnnotationTLSUpstream]
	if !ok {
		return nil
	}
	ref, field := gatewayRef(gw), annotationField(AnnotationTLSUpstream)
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		r.problems.warnf(ref, field, `ignored: want a JSON map of listener name to "host:port" or {"address": "host:port", "turnServerNames": [...]}: %v`, err)
		return nil
	}
	protos := map[string]protocol.Protocol{}
	for _, ls := range listeners {
		protos[string(ls.l.Name)] = ls.protocol
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]*config.TLSUpstream{}
	for _, name := range names {
		u, err := decodeUpstream(m[name])
		switch proto, ok := protos[name]; {
		case !ok:
			r.problems.warnf(ref, field, "no listener named %q; ignored", name)
		case proto != protocol.TURNTLS:
			r.problems.warnf(ref, field, "listener %q: only a TLS listener can have an upstream, not %s; ignored", name, proto)
		case err != "":
			r.problems.warnf(ref, field, "listener %q: %s; ignored", name, err)
		default:
			out[name] = u
		}
	}
	return out
}

// decodeUpstream reads one entry of AnnotationTLSUpstream and checks it
// as config.Config.Validate would, returning what is wrong ("" if
// nothing).
func decodeUpstream(raw json.RawMessage) (*config.TLSUpstream, string) {
	u := &config.TLSUpstream{}
	if err := json.Unmarshal(raw, &u.Address); err != nil {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(u); err != nil {
			return nil, `want "host:port" or {"address": "host:port", "turnServerNames": [...], "clientHelloTimeout": seconds}: ` + err.Error()
		}
	}
	if _, port, err := net.SplitHostPort(u.Address); err != nil {
		return nil, "address must be host:port, got " + strconv.Quote(u.Address)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, "address must have a numeric port, got " + strconv.Quote(u.Address)
	}
	if u.ClientHelloTimeout < 0 {
		return nil, "clientHelloTimeout must be 0 (the default) or more seconds"
	}
	for _, n := range u.TURNServerNames {
		if n == "" || strings.ContainsAny(n, " /:") {
			return nil, "turnServerNames: not a host name: " + strconv.Quote(n)
		}
	}
	return u, ""
}
