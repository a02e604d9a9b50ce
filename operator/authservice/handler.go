package authservice

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
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
	// Now is the clock ephemeral credentials and the rate limit count
	// from. Default time.Now.
	Now func() time.Time
	// RateLimit is how many requests per second each client address may
	// make, in bursts of RateBurst (a token bucket per address, IPv6 per
	// /64, in a fixed table of 8,192). A request past them gets 429 Too
	// Many Requests with Retry-After in seconds. The address is the HTTP
	// connection's remote address: X-Forwarded-For is not honoured, since
	// anyone can write it. 0 or less: no limit.
	RateLimit float64
	// RateBurst is the bucket's size; below 1 counts as 1.
	RateBurst int
	// TokenFile, when set, names a file holding a bearer token (surrounding
	// white space trimmed) that every request must carry as
	// "Authorization: Bearer <token>" (RFC 6750 §2.1); others get 401 with
	// WWW-Authenticate. The file is read on every request, so a rotated
	// Secret mounted there takes effect without a restart; an unreadable
	// or empty file refuses every request with 500.
	TokenFile string
}

// AnnotationServeStatic, set to "true" on a Gateway or on its
// GatewayConfig, lets the auth service hand out the GatewayConfig's static
// username and password. Without it a Gateway with static auth is left out
// of answers (403 when it alone was asked for): a static password given
// to whoever reaches the service is everyone's. STUNner serves static
// credentials unasked; this is Tern's own key.
const AnnotationServeStatic = "tern-gw.io/serve-static-credentials"

// Handler serves STUNner's auth service API. It is safe for concurrent use.
type Handler struct {
	reader  client.Reader
	opts    Options
	mux     *http.ServeMux
	limiter *limiter // nil: no rate limit
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
	if opts.RateLimit > 0 {
		h.limiter = newLimiter(opts.RateLimit, opts.RateBurst)
	}
	h.mux.HandleFunc("GET /ice", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, true) })
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, false) })
	return h
}

// ServeHTTP implements http.Handler: the rate limit first (so that
// guessing the bearer token is limited too), then the bearer token, then
// the endpoints.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.limiter != nil {
		ip := netip.IPv6Unspecified() // a RemoteAddr that does not parse shares one bucket
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			ip = ap.Addr()
		}
		if wait := h.limiter.allow(ip, h.opts.Now()); wait > 0 {
			secs := int64((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			h.opts.Log.Debug("auth request refused", "status", http.StatusTooManyRequests, "reason", "rate limit")
			http.Error(w, "too many requests from this address; retry after "+strconv.FormatInt(secs, 10)+" s", http.StatusTooManyRequests)
			return
		}
	}
	if h.opts.TokenFile != "" {
		if code, msg := h.checkToken(r); code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tern-auth-service"`)
			}
			h.opts.Log.Debug("auth request refused", "status", code, "reason", msg)
			http.Error(w, msg, code)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// checkToken compares r's bearer token with the one in TokenFile, in
// constant time over their SHA-256 hashes (which hides the token's
// length), and returns 0 when they match, else the status and why.
func (h *Handler) checkToken(r *http.Request) (int, string) {
	data, err := os.ReadFile(h.opts.TokenFile)
	want := strings.TrimSpace(string(data))
	if err != nil || want == "" {
		h.opts.Log.Error("reading the bearer token file", "file", h.opts.TokenFile, "err", err, "empty", want == "")
		return http.StatusInternalServerError, "the bearer token cannot be read; see the operator's log"
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)"
	}
	g, w := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(want))
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
		return http.StatusUnauthorized, "wrong bearer token"
	}
	return 0, ""
}

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

// serve answers one request of either endpoint: 400 for bad parameters, 403
// when the selection holds only Gateways with static auth that did not opt
// in (AnnotationServeStatic), 404
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
	case isForbidden(err):
		fail(http.StatusForbidden, err)
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
		// The GatewayConfig's authLifetime (else a day) is the default and
		// the cap: a longer ttl gets the cap, not an error, since clients
		// ask for what they like (STUNner's service takes any ttl).
		limit := s.lifetime
		if limit == 0 {
			limit = DefaultTTL
		}
		ttls[i] = limit
		if req.ttl > 0 && req.ttl < limit {
			ttls[i] = req.ttl
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
