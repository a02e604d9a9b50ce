package cds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// DefaultAddr is STUNner's config discovery address, which stunnerd,
// stunnerctl and turncat dial (port 13478).
const DefaultAddr = ":13478"

// The watch connection's keepalive. STUNner's clients ping every 5 s and
// give up after 8 s without a pong or a config; the server answers each
// ping with a pong carrying the ping's payload ("keepalive"). It also
// pings on its own every serverPingPeriod, which STUNner's clients (and any
// RFC 6455 client) answer, and drops a connection that has sent nothing,
// not even a pong, for readTimeout: a client gone without a FIN would
// otherwise hold its subscription forever.
const (
	serverPingPeriod = 20 * time.Second
	readTimeout      = 60 * time.Second
	writeTimeout     = 10 * time.Second
)

// License is STUNner's license status (v1.LicenseStatus), as its free tier
// reports it: what GET /api/v1/license answers. Tern has no license.
type License struct {
	EnabledFeatures  []string `json:"enabledFeatures"`
	SubscriptionType string   `json:"subscriptionType"`
	LastUpdated      string   `json:"lastUpdated"`
	LastError        string   `json:"lastError"`
}

// freeLicense is STUNner's status of an install without a license key.
var freeLicense = License{EnabledFeatures: []string{}, SubscriptionType: "free", LastUpdated: "N/A"}

// configList is STUNner's v1.ConfigList.
type configList struct {
	Version string            `json:"version"`
	Items   []json.RawMessage `json:"items"`
}

// apiError is STUNner's v1.Error.
type apiError struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

// Handler serves STUNner's config discovery API from a Store:
//
//	GET /api/v1/license                          License (free tier)
//	GET /api/v1/configs[?watch=true]             every Gateway's config
//	GET /api/v1/configs/{namespace}[?watch=true] the configs of a namespace
//	GET /api/v1/configs/{namespace}/{name}[?watch=true]
//	                                             one Gateway's config; 404 if none
//
// Clients on the operator pod's loopback (127.0.0.1 or ::1), which a
// port-forward through the Kubernetes API is (throughAPI), see every
// Gateway's config with its credentials (auth.credentials). Every other
// client is checked by its source address (Clients): it is served the
// public config, without credentials, of the Gateways it is a running
// dataplane pod of, and nothing else. A get or watch of another Gateway is
// answered 403, a list (or a watch of a list) leaves the others out, and
// each refusal is logged and counted (tern_config_discovery_refused_total).
// The check is made when a request arrives, so a watch keeps the Gateways
// it was allowed when it opened: its connection lives in the pod's network
// namespace and ends with the pod (docs/config-discovery.md). A nil Clients
// serves every client (tests of the API alone).
//
// Without watch, a list answers a v1.ConfigList ({"version":"v1","items":
// [...]}) and a name the config itself. With watch=true the request is
// upgraded to a WebSocket that gets each config as a text message: first
// the current configs watched, then every change, and a Gateway's deletion
// as STUNner's zero config (ZeroConfig). The "node" parameter STUNner's
// stunnerd sends is accepted and ignored: Tern's configs resolve node
// addresses in the dataplane ($(NODE_IP)). Errors are v1.Error JSON.
type Handler struct {
	store    *Store
	clients  Clients
	log      *slog.Logger
	upgrader websocket.Upgrader
	mux      *http.ServeMux
}

// NewHandler serves store to the clients that clients admits (nil: every
// client; see Handler); log may be nil.
func NewHandler(store *Store, clients Clients, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The default origin check (Origin, when sent, names the Host) is what
	// STUNner's clients pass: they send the server's own URL as Origin.
	h := &Handler{store: store, clients: clients, log: log, upgrader: websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 4096}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/license", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, freeLicense) })
	mux.HandleFunc("GET /api/v1/configs", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, "", "") })
	mux.HandleFunc("GET /api/v1/configs/{namespace}", func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, r.PathValue("namespace"), "")
	})
	mux.HandleFunc("GET /api/v1/configs/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, r.PathValue("namespace"), r.PathValue("name"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, Message: "no such API endpoint: " + r.Method + " " + r.URL.Path})
	})
	h.mux = mux
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, namespace, name string) {
	watch := false
	if v := r.URL.Query().Get("watch"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Code: http.StatusBadRequest, Message: fmt.Sprintf("invalid watch parameter %q: want true or false", v)})
			return
		}
		watch = b
	}
	private := throughAPI(r)
	acc, err := h.access(r)
	if err != nil {
		h.log.Warn("config discovery: cannot tell the client's pod", "client", r.RemoteAddr, "error", err)
		writeJSON(w, http.StatusServiceUnavailable, apiError{Code: http.StatusServiceUnavailable, Message: "cannot tell the client's pod yet: " + err.Error()})
		return
	}
	if name != "" && !acc.allows(namespace+"/"+name) {
		req := "get"
		if watch {
			req = "watch"
		}
		metricRefused.WithLabelValues(req).Inc()
		h.log.Info("config discovery: refused a client that is no running dataplane pod of the Gateway",
			"client", r.RemoteAddr, "request", req, "gateway", namespace+"/"+name)
		writeJSON(w, http.StatusForbidden, apiError{Code: http.StatusForbidden,
			Message: fmt.Sprintf("client %s is no running dataplane pod of Gateway %s/%s", clientAddr(r), namespace, name)})
		return
	}
	var allow func(string) bool
	if !acc.all {
		allow = acc.allows
	}
	if watch {
		h.watch(w, r, namespace, name, private, allow)
		return
	}
	if name == "" {
		items, left := h.store.List(namespace, private, allow)
		if left > 0 {
			metricRefused.WithLabelValues("list").Inc()
			h.log.Info("config discovery: left out of a list the Gateways the client is no running dataplane pod of",
				"client", r.RemoteAddr, "namespace", namespace, "left", left)
		}
		writeJSON(w, http.StatusOK, configList{Version: "v1", Items: items})
		return
	}
	public, priv, ok := h.store.Get(namespace, name)
	c := public
	if private && priv != nil {
		c = priv
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, Message: fmt.Sprintf("Config not found for ID %s/%s", namespace, name)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(c)
}

// watch upgrades the request and streams the configs namespace/name
// watches until the client goes, the watcher falls behind, or the store
// stops serving it.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request, namespace, name string, private bool, allow func(string) bool) {
	conn, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client with the error.
		h.log.Debug("config watch: upgrade failed", "client", r.RemoteAddr, "error", err)
		return
	}
	defer conn.Close()
	sub := h.store.subscribe(namespace, name, private, allow)
	defer h.store.unsubscribe(sub)
	h.log.Info("config watch opened", "client", r.RemoteAddr, "namespace", namespace, "name", name)

	// The reader: control frames are handled while reading, so it must
	// run; any data the client sends is dropped. Every frame extends the
	// read deadline.
	alive := func() { _ = conn.SetReadDeadline(time.Now().Add(readTimeout)) }
	alive()
	conn.SetPingHandler(func(data string) error {
		alive()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	conn.SetPongHandler(func(string) error { alive(); return nil })
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
			alive()
		}
	}()

	ping := time.NewTicker(serverPingPeriod)
	defer ping.Stop()
	reason := "client closed"
	defer func() { h.log.Info("config watch closed", "client", r.RemoteAddr, "reason", reason) }()
	for {
		select {
		case c, ok := <-sub.ch:
			if !ok {
				reason = "watcher fell behind or the server stopped"
				h.closeConn(conn)
				return
			}
			_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := conn.WriteMessage(websocket.TextMessage, c); err != nil {
				reason = "write: " + err.Error()
				return
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, []byte("keepalive"), time.Now().Add(writeTimeout)); err != nil {
				reason = "ping: " + err.Error()
				return
			}
		case <-gone:
			return
		case <-r.Context().Done():
			reason = "server stopped"
			h.closeConn(conn)
			return
		}
	}
}

func (h *Handler) closeConn(conn *websocket.Conn) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
}

// throughAPI reports whether r came from the operator pod's own loopback,
// 127.0.0.1 or ::1: how a port-forward (kubectl port-forward, stunnerctl,
// turncat) arrives, the container runtime dialling localhost in the pod's
// network namespace,
// after the Kubernetes API server authenticated the user, checked the
// pods/portforward permission, and carried the stream over TLS. Only such
// clients get the credentials: the pod network is neither authenticated
// nor encrypted (docs/security.md).
func throughAPI(r *http.Request) bool {
	// Exactly these two, not all of 127.0.0.0/8: tests stand for pods
	// from 127.0.0.2 and up.
	ip := clientAddr(r)
	return ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Server serves a Handler on a TCP address. It is a controller-runtime
// Runnable that runs on the elected leader only: the leader renders, so
// only its Store is filled (STUNner's operator serves its CDS from the
// leader too).
type Server struct {
	handler http.Handler
	log     *slog.Logger
	addr    string
	ln      net.Listener // nil until Start binds addr (NewServer)
}

// NewServer serves h on addr (DefaultAddr for STUNner's port) from Start
// on: the port is bound only once the replica is elected, so the others
// refuse connections at once rather than leave them waiting in a backlog
// nobody accepts.
func NewServer(addr string, h http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{handler: h, log: log, addr: addr}
}

// Listen binds addr (port 0 for any) for h at once, so that Addr tells the
// port before Start: for tests.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := NewServer(addr, h, log)
	s.ln = ln
	return s, nil
}

// Addr is the bound address; nil before a NewServer's Start.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// NeedLeaderElection is true: see Server.
func (s *Server) NeedLeaderElection() bool { return true }

// Start serves until ctx ends, then closes every connection, watches
// included (their clients reconnect to the next leader). It returns nil
// after such a stop, or the error that ended serving.
func (s *Server) Start(ctx context.Context) error {
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("config discovery service: %w", err)
		}
		s.ln = ln
	}
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(s.ln) }()
	s.log.Info("config discovery service listening", "addr", s.ln.Addr().String())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// Hijacked WebSocket connections are not closed by Shutdown: their
	// handlers end on the base context.
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}
