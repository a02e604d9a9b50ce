package authservice

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/operator/render"
)

// Options configure a Handler. The zero value serves the Gateways of
// STUNner's controller name at the addresses in their status.
type Options struct {
	// ControllerName selects the GatewayClasses whose Gateways are served.
	// Default render.DefaultControllerName.
	ControllerName string
	// PublicAddr, when set, replaces every Gateway's address in the URIs
	// (STUNner's STUNNER_PUBLIC_ADDR); a request's public-addr wins over it.
	PublicAddr string
	// Log receives one debug record per request (endpoint, selection,
	// status; never a username, password or secret) and a warning per
	// Gateway left out for a configuration error. Default: discard.
	Log *slog.Logger
	// Now is the clock ephemeral credentials count from. Default time.Now.
	Now func() time.Time
}

// Handler serves STUNner's auth service API. It is safe for concurrent use.
type Handler struct {
	reader client.Reader
	opts   Options
	mux    *http.ServeMux
}

// New returns the handler of GET /ice and GET / reading the cluster through
// reader, which must serve GatewayClasses, Gateways, GatewayConfigs,
// Services and Secrets (the operator's cached client does). Other paths get
// 404, other methods 405.
func New(reader client.Reader, opts Options) *Handler {
	if opts.ControllerName == "" {
		opts.ControllerName = render.DefaultControllerName
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Handler{reader: reader, opts: opts, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /ice", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, true) })
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, false) })
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// iceServer is an RTCIceServer (W3C WebRTC §4.2.4), as STUNner's auth
// service returns it.
type iceServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// iceConfig is the subset of an RTCConfiguration /ice returns.
type iceConfig struct {
	ICEServers         []iceServer `json:"iceServers"`
	ICETransportPolicy string      `json:"iceTransportPolicy"`
}

// turnCredential is the TURN REST API draft's response (§2.2), returned by /.
type turnCredential struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	TTL      int64    `json:"ttl"`
	URIs     []string `json:"uris"`
}

// serve answers one request of either endpoint: 400 for bad parameters, 404
// when the selection matches no usable Gateway or listener, 500 when the
// selected Gateways' credentials cannot be resolved or the cluster cannot
// be read, else 200 with JSON. Errors are text/plain, as STUNner's.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, ice bool) {
	endpoint := "/"
	if ice {
		endpoint = "/ice"
	}
	log := h.opts.Log.With("endpoint", endpoint)
	fail := func(code int, err error) {
		log.Debug("auth request refused", "status", code, "reason", err.Error())
		http.Error(w, err.Error(), code)
	}
	req, err := parseRequest(r.URL.Query(), ice)
	if err != nil {
		fail(http.StatusBadRequest, err)
		return
	}
	log = log.With("namespace", req.namespace, "gateway", req.gateway, "listener", req.listener)
	servers, skipped, err := h.lookup(r.Context(), req)
	for _, e := range skipped {
		log.Warn("Gateway left out of the answer", "reason", e.Error())
	}
	switch {
	case isNotFound(err):
		fail(http.StatusNotFound, err)
		return
	case isConfig(err):
		log.Warn("no credentials for the selected Gateways", "reason", err.Error())
		fail(http.StatusInternalServerError, err)
		return
	case err != nil:
		log.Error("reading the cluster", "err", err)
		fail(http.StatusInternalServerError, errors.New("cannot read the cluster; see the operator's log"))
		return
	}

	now := h.opts.Now()
	out := make([]iceServer, len(servers))
	ttls := make([]int64, len(servers))
	for i, s := range servers {
		ttls[i] = req.ttl
		if ttls[i] == 0 {
			ttls[i] = s.lifetime
		}
		if ttls[i] == 0 {
			ttls[i] = DefaultTTL
		}
		out[i] = iceServer{URLs: s.uris}
		switch {
		case s.stunOnly:
			// stun: URIs take no credentials (RTCIceServer ignores them).
		case s.auth.Type == config.AuthEphemeral:
			out[i].Username, out[i].Credential = Mint(s.auth.SharedSecret, req.user, now.Add(time.Duration(ttls[i])*time.Second))
		default:
			out[i].Username, out[i].Credential = s.auth.Username, s.auth.Password
		}
	}
	log.Debug("auth request answered", "status", http.StatusOK, "servers", len(out))

	// Credentials must not be cached by proxies or browsers.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	var body any
	if ice {
		body = iceConfig{ICEServers: out, ICETransportPolicy: req.policy}
	} else {
		// The draft's format holds one credential: the first Gateway's, as STUNner answers.
		body = turnCredential{Username: out[0].Username, Password: out[0].Credential, TTL: ttls[0], URIs: out[0].URLs}
	}
	if err := json.NewEncoder(w).Encode(body); err != nil {
		log.Debug("writing the answer", "err", err)
	}
}
