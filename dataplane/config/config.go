// Package config defines the dataplane config: the one contract between
// tern-operator, which renders it per Gateway, and ternd, which loads it.
//
// A config is a single versioned document, YAML or JSON. Parse (and Load,
// for a file) is the one way to read it: it decodes strictly, replaces the
// address placeholders $(POD_IP) and $(NODE_IP) from the environment,
// applies defaults and validates, returning errors that name the offending
// field by its path (for example "listeners[0].port"). A config built as a
// typed value (ternd's readers of stunnerd's formats in
// dataplane/stunnerdconf, bench) takes the same steps after decoding
// through Prepare, so there is one set of checks. The operator renders
// documents for Parse; this package imports nothing of the operator or of
// the Kubernetes API (internal/importrules checks), so both sides link it
// without the other's dependencies.
//
// Its vocabularies that the two sides also use on their own are leaf
// packages below it: protocol (the listener protocol table), placeholder
// (the address placeholders), loglevel (admin.logLevel's syntax) and
// endpoint (cluster endpoints and host:port). Reading the credential files
// a config names is ternd's (dataplane/secretfile).
package config

import (
	"slices"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// Version is the only config schema version this package understands.
const Version = "v1"

// Auth types. The aliases of STUNner's v1 API are accepted by NormalizeAuthType.
const (
	AuthStatic    = "static"
	AuthEphemeral = "ephemeral"
)

// Config is one dataplane's whole configuration: what one Gateway renders to.
type Config struct {
	// Version must be "v1".
	Version string `json:"version"`
	// STUNMode makes the dataplane a STUN server only (STUNner's
	// GatewayConfig stunMode): listeners answer STUN Binding requests and
	// refuse every TURN request (Allocate, Refresh, CreatePermission,
	// ChannelBind) with 403 Forbidden, so no allocation is ever made. Auth
	// credentials are then optional and unused. Changes in place on a
	// reload; allocations made before STUN mode was turned on are not
	// refreshed and run out. Default false.
	STUNMode  bool       `json:"stunMode,omitempty"`
	Admin     Admin      `json:"admin"`
	Auth      Auth       `json:"auth"`
	Listeners []Listener `json:"listeners"`
	Clusters  []Cluster  `json:"clusters,omitempty"`
	Relay     Relay      `json:"relay"`
	Limits    Limits     `json:"limits"`
	// Offload is the kernel fast path for TURN-UDP ChannelData
	// (docs/offload.md). Omitted, it is off.
	Offload Offload `json:"offload,omitzero"`
	// Alternates are the servers ("host:port", the host an IP address or
	// a DNS name) an Allocate is redirected to with 300 Try Alternate and
	// ALTERNATE-SERVER (RFC 8489 §10) while this dataplane drains or is
	// at its capacity (limits.maxAllocations, limits.stateBudgetMiB, no
	// free relay port); with
	// no alternate of the client's address family it answers 508. For a
	// Gateway they are its other replicas' client-facing addresses. Port
	// 0 stands for the port of the listener the Allocate arrived on. Names
	// are resolved when the config is loaded. Entries that are this
	// dataplane's own listener or public addresses are ignored, so one list
	// may name every replica. Changes in place on a reload.
	Alternates []string `json:"alternates,omitempty"`
}

// Offload selects the eBPF ChannelData fast path (docs/offload.md); its
// engines and attach methods live in package offloadmode.
type Offload = offloadmode.Settings

// Admin holds process-level settings.
type Admin struct {
	// Name identifies the dataplane in logs and metrics, e.g. "stunner/udp-gateway".
	Name string `json:"name,omitempty"`
	// LogLevel is one of trace, debug, info, warn, error, disable, or
	// STUNner's "all:INFO,turn:DEBUG" form (see loglevel.Parse). Default "info".
	LogLevel string `json:"logLevel,omitempty"`
	// MetricsAddress is host:port of the Prometheus /metrics endpoint; empty disables it.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// HealthAddress is host:port of /live and /ready; empty disables it.
	HealthAddress string `json:"healthAddress,omitempty"`
	// HandoverSocket is the path of the Unix socket on which a running
	// ternd hands its TURN-UDP sockets and allocations to a successor
	// started with --takeover (docs/operations.md "Upgrades"). Empty is
	// /run/tern/ternd.sock. Read at start; a reload does not move it.
	HandoverSocket string `json:"handoverSocket,omitempty"`
}

// Auth selects the TURN long-term credential mechanism (RFC 8489 §9.2).
type Auth struct {
	// Type is static or ephemeral; aliases plaintext (static), longterm and
	// timewindowed (ephemeral) are accepted and normalized by Load.
	Type string `json:"type"`
	// Realm is sent in REALM and keys MESSAGE-INTEGRITY. Default "stunner.l7mp.io".
	Realm string `json:"realm"`
	// Username and Password are the static credentials.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SharedSecret keys ephemeral (TURN REST API) credentials: username
	// "<expiry-unix-seconds>:<user>", password base64(HMAC-SHA1(secret, username)).
	SharedSecret string `json:"sharedSecret,omitempty"`
	// PasswordFile and SharedSecretFile name files that hold the password
	// or the shared secret, in place of Password and SharedSecret: a
	// Kubernetes Secret mounted in the dataplane pod, so that no credential
	// is stored in the ConfigMap. The dataplane reads them (package
	// dataplane/secretfile) and re-reads them when they change.
	PasswordFile     string `json:"passwordFile,omitempty"`
	SharedSecretFile string `json:"sharedSecretFile,omitempty"`
}

// Listener is one TURN listener (a Gateway listener).
type Listener struct {
	// Name is unique within the config.
	Name string `json:"name"`
	// Protocol is TURN-UDP, TURN-TCP, TURN-TLS or TURN-DTLS (see package
	// protocol; SetDefaults normalizes the aliases UDP, TCP, TLS, DTLS).
	Protocol protocol.Protocol `json:"protocol"`
	// Address is the IP to bind, e.g. "127.0.0.1" or "0.0.0.0".
	Address string `json:"address"`
	// Port is the port to bind, 1-65535.
	Port int `json:"port"`
	// PublicAddress and PublicPort are what clients are told to use (for ICE
	// configs); informational for the dataplane.
	PublicAddress string `json:"publicAddress,omitempty"`
	PublicPort    int    `json:"publicPort,omitempty"`
	// Cert and Key are PEM file paths for TURN-TLS and TURN-DTLS.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// Routes names the clusters whose peers clients of this listener may reach.
	Routes []string `json:"routes,omitempty"`
	// Upstream (TURN-TLS only) shares the port with an HTTPS server (see
	// TLSUpstream); nil: every connection is TURN-TLS. Changes apply to new
	// connections without a restart.
	Upstream *TLSUpstream `json:"upstream,omitempty"`
}

// DefaultClientHelloTimeout is TLSUpstream.ClientHelloTimeout's default, s.
const DefaultClientHelloTimeout = 5

// TLSUpstream is where a TURN-TLS listener splices, unterminated, the
// connections whose ClientHello is not TURN's: TURN offers ALPN
// "stun.turn" (RFC 7443), names one of TURNServerNames in SNI, or sends
// neither ALPN nor SNI (libwebrtc to a turns: URL with an IP address).
type TLSUpstream struct {
	// Address is the upstream's host:port (IP or DNS name, resolved per
	// connection), e.g. "ingress-nginx.ingress.svc:443".
	Address string `json:"address"`
	// TURNServerNames are SNI host names served as TURN-TLS whatever the
	// ALPN, compared case-insensitively.
	TURNServerNames []string `json:"turnServerNames,omitempty"`
	// ClientHelloTimeout bounds the wait for a whole ClientHello, seconds;
	// 0 takes DefaultClientHelloTimeout.
	ClientHelloTimeout int `json:"clientHelloTimeout,omitempty"`
}

// Cluster is a set of peers that a route allows (a UDPRoute backend).
type Cluster struct {
	// Name is unique within the config.
	Name string `json:"name"`
	// Type is STATIC (the default) or STRICT_DNS, case-insensitive.
	Type string `json:"type,omitempty"`
	// Endpoints are IP addresses or CIDR prefixes ("10.0.0.5",
	// "10.0.0.0/24"); in a STRICT_DNS cluster, host names.
	Endpoints []string `json:"endpoints"`
	// MinPort and MaxPort restrict the peer port range, inclusive; 0/0 allows all ports.
	MinPort int `json:"minPort,omitempty"`
	MaxPort int `json:"maxPort,omitempty"`
}

// Relay says where relay sockets are bound.
type Relay struct {
	// Address is the IP relay sockets bind to; default the first listener's
	// address (or 127.0.0.1 when that is a wildcard).
	Address string `json:"address,omitempty"`
	// PublicAddress, when set, is advertised in XOR-RELAYED-ADDRESS instead of Address
	// (e.g. the node IP under hostNetwork behind 1:1 NAT).
	PublicAddress string `json:"publicAddress,omitempty"`
	// NodePublicAddresses maps Kubernetes node names to the address to
	// advertise on that node: the node's ExternalIP, which the operator
	// renders for hostNetwork dataplanes, whose relay sockets bind the
	// node's InternalIP. Parse sets PublicAddress to the entry of the node
	// named by the environment variable NODE_NAME, when there is one; other
	// nodes keep PublicAddress as written. After Parse the map has no
	// further effect (Equal ignores it).
	NodePublicAddresses map[string]string `json:"nodePublicAddresses,omitempty"`
	// MinPort and MaxPort bound the relay port range, inclusive. Default 20000-29999.
	MinPort int `json:"minPort,omitempty"`
	MaxPort int `json:"maxPort,omitempty"`
	// ExtraAddresses are more addresses to relay from, each with the whole
	// port range: one IP has at most ~64k ports, so a server that holds
	// more allocations needs several (as coturn's repeated --relay-ip). An
	// IPv6 address here also lets clients ask for IPv6 relayed transport
	// addresses (REQUESTED-ADDRESS-FAMILY, RFC 8656 §7.2). New allocations
	// take the addresses of their family in turn.
	ExtraAddresses []RelayAddress `json:"extraAddresses,omitempty"`
}

// RelayAddress is one more address relay sockets bind to.
type RelayAddress struct {
	// Address is the IP relay sockets bind to.
	Address string `json:"address"`
	// PublicAddress, when set, is advertised instead of Address.
	PublicAddress string `json:"publicAddress,omitempty"`
}

// Equal reports whether r and o describe the same relay sockets.
func (r Relay) Equal(o Relay) bool {
	return r.Address == o.Address && r.PublicAddress == o.PublicAddress &&
		r.MinPort == o.MinPort && r.MaxPort == o.MaxPort && slices.Equal(r.ExtraAddresses, o.ExtraAddresses)
}

// Limits are the engine's lifetimes, quotas and throttles. Durations are
// in seconds. For the quotas and the throttle, 0 (or unset) takes the
// default and NoLimit (-1) turns the limit off.
type Limits struct {
	// MaxLifetime clamps a requested allocation LIFETIME, seconds. Default 600.
	MaxLifetime int `json:"maxLifetime,omitempty"`
	// NonceLifetime is how long a NONCE stays valid before 438, seconds. Default 600.
	NonceLifetime int `json:"nonceLifetime,omitempty"`
	// AllocationsPerUser caps concurrent allocations per USERNAME (486).
	// Default DefaultAllocationsPerUser with ephemeral auth; NoLimit with
	// static auth, whose one username every client shares.
	AllocationsPerUser int `json:"allocationsPerUser,omitempty"`
	// AllocationsPerIP caps concurrent allocations per client IP, per /64
	// for IPv6 (486). Default DefaultAllocationsPerIP.
	AllocationsPerIP int `json:"allocationsPerIP,omitempty"`
	// MaxAllocations caps all allocations and EVEN-PORT reservations
	// (508). 0 (the default) or NoLimit: the relay ports are the cap,
	// (maxPort-minPort+1) per relay address, which a reconfiguration of
	// relay.extraAddresses moves with it.
	MaxAllocations int `json:"maxAllocations,omitempty"`
	// StateBudgetMiB caps the memory of allocations, permissions and
	// channel bindings together, MiB: past it Allocate, CreatePermission
	// and ChannelBind get 508 (docs/security.md). 0 (the default): half the
	// container's memory limit (cgroup), or 256 MiB where none is set;
	// NoLimit: no budget. ternd --state-budget-mib overrides it.
	StateBudgetMiB int `json:"stateBudgetMiB,omitempty"`
	// AllocationImbalancePercent evens out the replicas named in
	// Alternates: while this server holds more than this many percent
	// above the mean allocation count of itself and the alternates that
	// answer (at least 10 allocations above it), a client's first,
	// unsigned Allocate is redirected to an alternate below the mean (300
	// Try Alternate, RFC 8489 §10). The counts come from each alternate's
	// /status at this server's health port, every 2 s. 0 (the default):
	// off.
	AllocationImbalancePercent int `json:"allocationImbalancePercent,omitempty"`
	// AuthFailureBurst and AuthFailureRate throttle failed authentication
	// per client address: a token bucket of AuthFailureBurst failures,
	// refilled at AuthFailureRate per second. Defaults
	// DefaultAuthFailureBurst and DefaultAuthFailureRate; NoLimit in either
	// turns the throttle off.
	AuthFailureBurst int `json:"authFailureBurst,omitempty"`
	AuthFailureRate  int `json:"authFailureRate,omitempty"`
	// StrictChannelNumbers limits ChannelBind to RFC 8656 §12's channel
	// numbers 0x4000-0x4FFF (400 Bad Request above). Default false: RFC
	// 5766's 0x4000-0x7FFF are accepted, as coturn and pion/turn servers
	// do, because coturn's turnutils_uclient binds numbers up to 0x7FFF.
	StrictChannelNumbers bool `json:"strictChannelNumbers,omitempty"`
	// LegacyChannelNumbers is deprecated and has no effect: it once let in
	// the numbers 0x5000-0x7FFF that are now accepted by default. It is
	// still read, so that configs that set it load; ternd logs a
	// deprecation line when it is true.
	LegacyChannelNumbers bool `json:"legacyChannelNumbers,omitempty"`
	// ConnectionIdleTimeout is how long a TURN-TCP, TURN-TLS or TURN-DTLS
	// connection that holds no allocation may stay silent before it is
	// closed, seconds. Default 30. Once the connection holds an allocation,
	// the limit is maxLifetime + 30 s.
	ConnectionIdleTimeout int `json:"connectionIdleTimeout,omitempty"`
	// PartialFrameTimeout is how long a TURN-TCP or TURN-TLS connection may
	// take to send the rest of a STUN message or ChannelData frame once its
	// first bytes have arrived before it is closed, seconds. 0 (or unset)
	// takes DefaultPartialFrameTimeout (5), which ternd applies when it
	// starts a listener rather than when it loads the config.
	PartialFrameTimeout int `json:"partialFrameTimeout,omitempty"`
	// ConnectionsPerIP caps each listener's concurrent connections from one
	// client IPv4 address or IPv6 /64; more are closed at accept. Default 500.
	ConnectionsPerIP int `json:"connectionsPerIP,omitempty"`
	// MaxConnections caps each listener's concurrent connections. Default
	// 10000. At the cap a new connection closes the oldest one that holds
	// no allocation, or is closed itself when every connection holds one.
	MaxConnections int `json:"maxConnections,omitempty"`
}
