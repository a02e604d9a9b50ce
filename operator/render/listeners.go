package render

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// listenerState is one Gateway listener while rendering.
type listenerState struct {
	l         *gwapiv1.Listener
	field     string            // spec.listeners[i]
	protocol  protocol.Protocol // normalized; "" if unsupported
	transport corev1.Protocol
	tlsSecret string // Secret name in the Gateway's namespace, for TLS and DTLS

	accepted, conflicted, resolved bool
	acceptReason, refReason        string
	problems                       []Problem

	kinds    []gwapiv1.RouteGroupKind
	attached map[string]bool // route keys
	clusters map[string]bool // cluster names
	exposed  bool            // has a port in the Service

	targetPort int // the port ternd listens on, from AnnotationTargetPort; 0: the listener's
	nodePort   int // the Service port's nodePort, from AnnotationNodePort; 0: Kubernetes picks
}

// port is the port ternd listens on for the listener: the Service forwards
// the listener's port there.
func (ls *listenerState) port() int {
	if ls.targetPort != 0 {
		return ls.targetPort
	}
	return int(ls.l.Port)
}

// usable reports whether the listener goes into the dataplane config.
func (ls *listenerState) usable() bool { return ls.accepted && !ls.conflicted && ls.resolved }

// serviceProtocol is the protocol of the Service port that exposes a
// listener of transport t (a DTLS listener is a UDP port, TLS a TCP one).
func serviceProtocol(t protocol.Transport) corev1.Protocol {
	if t == protocol.TransportTCP {
		return corev1.ProtocolTCP
	}
	return corev1.ProtocolUDP
}

// checkListeners validates each listener of gw: a TURN protocol, a port no
// earlier listener takes on the same transport, and for TLS and DTLS a
// certificateRef to a Secret in the Gateway's namespace with tls.crt and
// tls.key.
func (r *renderer) checkListeners(gw *gwapiv1.Gateway) []*listenerState {
	ref := gatewayRef(gw)
	out := make([]*listenerState, len(gw.Spec.Listeners))
	taken := map[string]string{} // transport/port -> listener name
	for i := range gw.Spec.Listeners {
		l := &gw.Spec.Listeners[i]
		ls := &listenerState{l: l, field: fmt.Sprintf("spec.listeners[%d]", i), accepted: true, resolved: true,
			attached: map[string]bool{}, clusters: map[string]bool{}}
		out[i] = ls
		bad := func(field, format string, args ...any) {
			ls.problems = append(ls.problems, r.problems.errorf(ref, ls.field+field, format, args...))
		}

		// STUNner's operator reads UDP, TCP, TLS and DTLS as the TURN
		// protocols of that transport, and its published manifests use them.
		if proto, ok := protocol.Normalize(string(l.Protocol)); ok {
			ls.protocol, ls.transport = proto, serviceProtocol(proto.Transport())
		} else {
			ls.accepted, ls.acceptReason = false, string(gwapiv1.ListenerReasonUnsupportedProtocol)
			bad(".protocol", "unsupported protocol %q: want %s", l.Protocol, protocol.Names())
		}
		if l.Port < 1 || l.Port > 65535 {
			ls.accepted, ls.acceptReason = false, string(gwapiv1.ListenerReasonPortUnavailable)
			bad(".port", "must be 1-65535, got %d", l.Port)
		}
		if ls.accepted {
			key := fmt.Sprintf("%s/%d", ls.transport, l.Port)
			if other, dup := taken[key]; dup {
				ls.conflicted = true
				bad(".port", "%s port %d is already used by listener %q", ls.transport, l.Port, other)
			} else {
				taken[key] = string(l.Name)
			}
		}

		switch {
		case ls.protocol.Secure():
			r.checkTLS(gw, ls, bad)
		case ls.protocol != "":
			if l.TLS != nil {
				ls.problems = append(ls.problems, r.problems.warnf(ref, ls.field+".tls", "ignored for %s", ls.protocol))
			}
		}

		kinds, invalid := listenerKinds(l)
		ls.kinds = kinds
		if len(invalid) > 0 {
			ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonInvalidRouteKinds)
			bad(".allowedRoutes.kinds", "unsupported route kinds %v: only UDPRoute", invalid)
		}
	}
	return out
}

// checkTLS resolves the certificate of a TLS or DTLS listener.
func (r *renderer) checkTLS(gw *gwapiv1.Gateway, ls *listenerState, bad func(string, string, ...any)) {
	tls := ls.l.TLS
	if tls != nil && tls.Mode != nil && *tls.Mode != gwapiv1.TLSModeTerminate {
		ls.accepted, ls.acceptReason = false, "UnsupportedTLSMode"
		bad(".tls.mode", "must be Terminate (or unset) for %s, got %s", ls.protocol, *tls.Mode)
		return
	}
	if tls == nil || len(tls.CertificateRefs) == 0 {
		ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonInvalidCertificateRef)
		bad(".tls.certificateRefs", "%s needs a certificateRef to a Secret with tls.crt and tls.key", ls.protocol)
		return
	}
	if len(tls.CertificateRefs) > 1 {
		ls.problems = append(ls.problems, r.problems.warnf(gatewayRef(gw), ls.field+".tls.certificateRefs", "only the first certificateRef is used"))
	}
	c := tls.CertificateRefs[0]
	field := ".tls.certificateRefs[0]"
	if (c.Group != nil && *c.Group != "") || (c.Kind != nil && *c.Kind != "Secret") {
		ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonInvalidCertificateRef)
		bad(field, "must refer to a core Secret, got %s.%s", deref(c.Kind), deref(c.Group))
		return
	}
	ns := gw.Namespace
	if c.Namespace != nil && *c.Namespace != "" {
		ns = string(*c.Namespace)
	}
	if ns != gw.Namespace {
		// A pod can mount Secrets of its own namespace only, and copying a
		// Secret out of another namespace would let anyone who may create
		// a Gateway read it.
		ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonRefNotPermitted)
		bad(field, "Secret %s/%s is not in the Gateway's namespace %s", ns, c.Name, gw.Namespace)
		return
	}
	s := r.secrets[nsName(ns, string(c.Name))]
	if s == nil {
		ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonInvalidCertificateRef)
		bad(field, "Secret %s/%s not found", ns, c.Name)
		return
	}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(s.Data[k]) == 0 {
			ls.resolved, ls.refReason = false, string(gwapiv1.ListenerReasonInvalidCertificateRef)
			bad(field, "Secret %s/%s has no key %s", ns, c.Name, k)
		}
	}
	if ls.resolved {
		ls.tlsSecret = s.Name
	}
}

// tlsFiles returns the cert and key paths of a TLS Secret under dir.
func tlsFiles(dir, secret string) (cert, key string) {
	return path.Join(dir, secret, corev1.TLSCertKey), path.Join(dir, secret, corev1.TLSPrivateKeyKey)
}
