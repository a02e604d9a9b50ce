package authservice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

// server is what one Gateway contributes to an answer: its TURN URIs and
// how to make its credentials.
type server struct {
	name     string // namespace/name of the Gateway
	uris     []string
	auth     config.Auth
	lifetime int64 // the GatewayConfig's authLifetime in seconds; 0 if unset
	// stunOnly: the GatewayConfig's stunMode. The Gateway answers STUN
	// Binding requests only, so it is offered as stun: URIs of its
	// TURN-UDP listeners, without credentials.
	stunOnly bool
	// staticOptIn: the GatewayConfig carries AnnotationServeStatic.
	staticOptIn bool
}

// forbiddenError is a selection whose only Gateways have static auth
// without AnnotationServeStatic; the handler answers 403 with it.
type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string { return e.msg }

// staticRefusal says why a Gateway's static credentials are not served,
// with the one-line fix.
func staticRefusal(name string) string {
	return "Gateway " + name + ": static credentials are served only when the Gateway or its GatewayConfig has the annotation " +
		AnnotationServeStatic + `: "true"; prefer ephemeral auth`
}

// optedIn reports whether annotations hold AnnotationServeStatic: "true".
func optedIn(annotations map[string]string) bool {
	return strings.EqualFold(strings.TrimSpace(annotations[AnnotationServeStatic]), "true")
}

// notFoundError is a selection that matches nothing usable; the handler
// answers 404 with it.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// configError is a Gateway whose credentials cannot be known (its class or
// GatewayConfig is broken); the handler answers 500 with it.
// gateway is the Gateway's namespace/name, or "" for several errors joined
// in err.
type configError struct {
	gateway string
	err     error
}

func (e *configError) Error() string {
	if e.gateway == "" {
		return e.err.Error()
	}
	return "Gateway " + e.gateway + ": " + e.err.Error()
}

// lookup returns the servers req selects, in namespace/name order: every
// Gateway of a GatewayClass with controllerName, narrowed by req's
// namespace, gateway and listener. A Gateway counts when it has a public
// address and a listener that is Programmed; the others are left out, and
// when nothing is left the *notFoundError says why. A selected Gateway
// whose credentials cannot be resolved is a *configError when the request
// named it, and is otherwise left out and returned in skipped (a
// *configError joining them all when no Gateway is left). A Gateway with
// static auth and no AnnotationServeStatic on it or its GatewayConfig is a
// *forbiddenError when the request named it, and is otherwise left out (a
// *forbiddenError when no Gateway is left). Other errors are the reader's.
func (h *Handler) lookup(ctx context.Context, req request) (servers []server, skipped []error, err error) {
	var classes gwapiv1.GatewayClassList
	if err := h.reader.List(ctx, &classes); err != nil {
		return nil, nil, fmt.Errorf("listing GatewayClasses: %w", err)
	}
	managed := map[string]*gwapiv1.GatewayClass{}
	for i := range classes.Items {
		if c := &classes.Items[i]; string(c.Spec.ControllerName) == h.opts.ControllerName {
			managed[c.Name] = c
		}
	}

	var gws []gwapiv1.Gateway
	if req.gateway != "" {
		var gw gwapiv1.Gateway
		if err := h.reader.Get(ctx, client.ObjectKey{Namespace: req.namespace, Name: req.gateway}, &gw); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, &notFoundError{fmt.Sprintf("Gateway %s/%s not found", req.namespace, req.gateway)}
			}
			return nil, nil, fmt.Errorf("reading Gateway %s/%s: %w", req.namespace, req.gateway, err)
		}
		if managed[string(gw.Spec.GatewayClassName)] == nil {
			return nil, nil, &notFoundError{fmt.Sprintf("Gateway %s/%s is of GatewayClass %q, whose controllerName is not %s",
				req.namespace, req.gateway, gw.Spec.GatewayClassName, h.opts.ControllerName)}
		}
		gws = []gwapiv1.Gateway{gw}
	} else {
		var list gwapiv1.GatewayList
		if err := h.reader.List(ctx, &list, client.InNamespace(req.namespace)); err != nil {
			return nil, nil, fmt.Errorf("listing Gateways: %w", err)
		}
		for _, gw := range list.Items {
			if managed[string(gw.Spec.GatewayClassName)] != nil {
				gws = append(gws, gw)
			}
		}
		if len(gws) == 0 {
			where := "in the cluster"
			if req.namespace != "" {
				where = "in namespace " + req.namespace
			}
			return nil, nil, &notFoundError{fmt.Sprintf("no Gateway of a GatewayClass with controllerName %s %s", h.opts.ControllerName, where)}
		}
		sort.Slice(gws, func(i, j int) bool {
			return gws[i].Namespace+"/"+gws[i].Name < gws[j].Namespace+"/"+gws[j].Name
		})
	}

	var configs []stnrv1.GatewayConfig // listed on first use
	var why []string                   // why Gateways were left out, for the 404
	var refused []string               // static Gateways without the opt-in, for the 403
	for i := range gws {
		gw := &gws[i]
		name := gw.Namespace + "/" + gw.Name
		uris, reason, err := h.uris(ctx, gw, req)
		if err != nil {
			return nil, nil, err
		}
		if len(uris) == 0 {
			why = append(why, "Gateway "+name+": "+reason)
			continue
		}
		if configs == nil {
			var list stnrv1.GatewayConfigList
			if err := h.reader.List(ctx, &list); err != nil {
				return nil, nil, fmt.Errorf("listing GatewayConfigs: %w", err)
			}
			configs = list.Items
			if configs == nil {
				configs = []stnrv1.GatewayConfig{}
			}
		}
		srv, err := h.credentials(ctx, managed[string(gw.Spec.GatewayClassName)], configs)
		if err != nil {
			err = &configError{gateway: name, err: err}
			if req.gateway != "" {
				return nil, nil, err
			}
			skipped = append(skipped, err)
			continue
		}
		if !srv.stunOnly && srv.auth.Type != config.AuthEphemeral && !srv.staticOptIn && !optedIn(gw.Annotations) {
			if req.gateway != "" {
				return nil, nil, &forbiddenError{staticRefusal(name)}
			}
			refused = append(refused, staticRefusal(name))
			continue
		}
		if srv.stunOnly {
			if uris = stunURIs(uris); len(uris) == 0 {
				why = append(why, "Gateway "+name+": STUN mode, and no TURN-UDP listener to offer as a stun: URI")
				continue
			}
		}
		srv.name, srv.uris = name, uris
		servers = append(servers, srv)
	}
	switch {
	case len(servers) == 0 && len(skipped) > 0:
		return nil, nil, &configError{err: errors.Join(skipped...)}
	case len(servers) == 0 && len(refused) > 0:
		return nil, nil, &forbiddenError{strings.Join(refused, "; ")}
	case len(servers) == 0:
		return nil, nil, &notFoundError{strings.Join(why, "; ")}
	}
	return servers, skipped, nil
}

// uris returns the TURN URIs of gw's listeners that req selects, or none and
// the reason. A listener is offered when its protocol is a TURN one and its
// status says Programmed (the operator put it into the dataplane config).
// The host is req's public-addr, else the service's, else the first IP
// address in the Gateway's status (else the first hostname); the port is
// the listener's, or the node port of its Service port when the Gateway's
// Service is a NodePort one.
func (h *Handler) uris(ctx context.Context, gw *gwapiv1.Gateway, req request) ([]string, string, error) {
	if req.listener != "" {
		found := false
		for _, l := range gw.Spec.Listeners {
			found = found || string(l.Name) == req.listener
		}
		if !found {
			return nil, fmt.Sprintf("no listener %q", req.listener), nil
		}
	}
	host := req.publicAddr
	if host == "" {
		host = h.opts.PublicAddr
	}
	if host == "" {
		host = statusAddress(gw)
	}
	if host == "" {
		return nil, "no public address yet (status.addresses is empty; the public-addr parameter sets one)", nil
	}
	var svc *corev1.Service
	var uris, unprogrammed []string
	for _, l := range gw.Spec.Listeners {
		if req.listener != "" && string(l.Name) != req.listener {
			continue
		}
		// STUNner's aliases (UDP, TCP, TLS, DTLS) name the same listeners.
		proto, _ := protocol.Normalize(string(l.Protocol))
		info, ok := proto.Info()
		if !ok || !programmed(gw, l.Name) {
			unprogrammed = append(unprogrammed, string(l.Name))
			continue
		}
		if svc == nil {
			svc = &corev1.Service{}
			err := h.reader.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: gw.Name}, svc)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, "", fmt.Errorf("reading Service %s/%s: %w", gw.Namespace, gw.Name, err)
			}
		}
		// The TURN URI's scheme and transport (RFC 7065 §3.1), as STUNner
		// writes them: DTLS is turns over udp, TLS turns over tcp.
		port := publicPort(svc, l, info.Transport)
		uris = append(uris, info.URIScheme()+":"+net.JoinHostPort(host, strconv.Itoa(port))+"?transport="+string(info.Transport))
	}
	if len(uris) == 0 {
		return nil, fmt.Sprintf("no programmed TURN listener (not programmed: %s)", strings.Join(unprogrammed, ", ")), nil
	}
	return uris, "", nil
}

// statusAddress is the first IP address of gw's status, else its first
// hostname, else "".
func statusAddress(gw *gwapiv1.Gateway) string {
	for _, a := range gw.Status.Addresses {
		if a.Type == nil || *a.Type == gwapiv1.IPAddressType {
			return a.Value
		}
	}
	for _, a := range gw.Status.Addresses {
		if *a.Type == gwapiv1.HostnameAddressType {
			return a.Value
		}
	}
	return ""
}

// programmed reports whether gw's status says listener name is Programmed.
func programmed(gw *gwapiv1.Gateway, name gwapiv1.SectionName) bool {
	for _, l := range gw.Status.Listeners {
		if l.Name == name {
			return meta.IsStatusConditionTrue(l.Conditions, string(gwapiv1.ListenerConditionProgrammed))
		}
	}
	return false
}

// publicPort is the port clients reach listener l at: the node port of the
// Service port that exposes it when svc is a NodePort Service, else the
// listener's port (a LoadBalancer Service exposes the listener's port).
func publicPort(svc *corev1.Service, l gwapiv1.Listener, t protocol.Transport) int {
	transport := corev1.ProtocolUDP
	if t == protocol.TransportTCP {
		transport = corev1.ProtocolTCP
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort {
		for _, p := range svc.Spec.Ports {
			if p.Port == l.Port && p.Protocol == transport && p.NodePort != 0 {
				return int(p.NodePort)
			}
		}
	}
	return int(l.Port)
}

// credentials resolves the auth of class's GatewayConfig among configs, with
// the Secrets it refers to, by the renderer's rules, so the credentials are
// the ones the dataplane checks.
func (h *Handler) credentials(ctx context.Context, class *gwapiv1.GatewayClass, configs []stnrv1.GatewayConfig) (server, error) {
	gc, err := render.ClassGatewayConfig(class, configs)
	if err != nil {
		return server{}, err // names the class and the field
	}
	if gc.Spec.STUNMode {
		// No TURN request is served, so no credential is needed (the
		// renderer ignores them too).
		return server{stunOnly: true}, nil
	}
	var secrets []corev1.Secret
	for _, key := range render.AuthSecrets(gc) {
		var s corev1.Secret
		if err := h.reader.Get(ctx, key, &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue // GatewayConfigAuth names the missing Secret and the field
			}
			return server{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		secrets = append(secrets, s)
	}
	auth, err := render.GatewayConfigAuth(gc, secrets)
	if err != nil {
		return server{}, err
	}
	srv := server{auth: auth, staticOptIn: optedIn(gc.Annotations)}
	if gc.Spec.AuthLifetime != nil && *gc.Spec.AuthLifetime > 0 {
		srv.lifetime = int64(*gc.Spec.AuthLifetime)
	}
	return srv, nil
}

// stunURIs turns the "turn:" URIs of UDP listeners into the "stun:" URIs
// (RFC 7064) a Gateway in STUN mode is reached at, and drops the others:
// browsers speak STUN to a stun: URI over UDP only.
func stunURIs(uris []string) []string {
	var out []string
	for _, u := range uris {
		if hostPort, ok := strings.CutPrefix(u, "turn:"); ok {
			if hostPort, ok = strings.CutSuffix(hostPort, "?transport=udp"); ok {
				out = append(out, "stun:"+hostPort)
			}
		}
	}
	return out
}

// isNotFound, isConfig and isForbidden classify lookup's errors for the handler.
func isNotFound(err error) bool  { var e *notFoundError; return errors.As(err, &e) }
func isConfig(err error) bool    { var e *configError; return errors.As(err, &e) }
func isForbidden(err error) bool { var e *forbiddenError; return errors.As(err, &e) }
