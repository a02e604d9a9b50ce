package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/placeholder"
)

// CDSTernKey is the top-level key of a config served over the config
// discovery service (CDS) that holds Tern's own config document, the
// ConfigMap's ConfigKey content as a JSON object. stunnerd, stunnerctl and
// turncat decode CDS configs into STUNner's v1 types with non-strict
// decoders (sigs.k8s.io/yaml, encoding/json), which skip unknown keys, so
// they read the rest of the document and ignore this one; ternd reads this
// one and ignores the rest.
const CDSTernKey = "tern"

// stunnerd's spellings of what Tern writes as placeholders: its relay
// address variable (STUNner's pods set STUNNER_ADDR to status.podIP).
const stunnerdPodAddr = "$STUNNER_ADDR"

// cdsConfig is a STUNner v1 dataplane config ("stunnerd.conf"), the form
// the config discovery service serves, with Tern's document beside it.
// Field names follow STUNner's v1 API (pkg/apis/v1 of l7mp/stunner, which
// its OpenAPI description refers to for v1.Config).
type cdsConfig struct {
	Version   string          `json:"version"`
	Admin     cdsAdmin        `json:"admin"`
	Auth      cdsAuth         `json:"auth"`
	Listeners []cdsListener   `json:"listeners,omitempty"`
	Clusters  []cdsCluster    `json:"clusters,omitempty"`
	Tern      json.RawMessage `json:"tern,omitempty"`
}

type cdsAdmin struct {
	Name                string  `json:"name,omitempty"`
	LogLevel            string  `json:"loglevel,omitempty"`
	MetricsEndpoint     string  `json:"metrics_endpoint,omitempty"`
	HealthCheckEndpoint *string `json:"healthcheck_endpoint,omitempty"`
}

type cdsAuth struct {
	Type        string            `json:"type,omitempty"`
	Realm       string            `json:"realm,omitempty"`
	Credentials map[string]string `json:"credentials"`
}

type cdsListener struct {
	Name       string   `json:"name,omitempty"`
	Protocol   string   `json:"protocol,omitempty"`
	PublicAddr string   `json:"public_address,omitempty"`
	PublicPort int      `json:"public_port,omitempty"`
	Addr       string   `json:"address,omitempty"`
	Port       int      `json:"port,omitempty"`
	Routes     []string `json:"routes,omitempty"`
}

type cdsCluster struct {
	Name      string   `json:"name"`
	Type      string   `json:"type,omitempty"`
	Protocol  string   `json:"protocol,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
}

// CDSConfig returns the Gateway's config as the config discovery service
// serves it: STUNner's v1 JSON of the same config that ConfigMap holds,
// with that ConfigMap document itself under CDSTernKey. It is nil when the
// Gateway did not render (Config or ConfigMap nil).
//
// The STUNner fields describe the Gateway for STUNner's tools (stunnerctl
// config, turncat k8s://): listeners, clusters, auth type and realm.
// Credentials are not in it: the config names files of the Gateway's
// Secret, which the kubelet mounts into the dataplane pods, so auth
// credentials carry the keys STUNner's validation requires (username and
// password, or secret) with the static username only
// (CDSConfigWithCredentials fills them in). Address placeholders
// become stunnerd's $STUNNER_ADDR.
func (g *GatewayResult) CDSConfig() ([]byte, error) {
	public, _, err := g.CDSConfigs()
	return public, err
}

// CDSConfigWithCredentials is CDSConfig with auth.credentials holding the
// password or shared secret of the Gateway's credentials Secret, as
// STUNner's operator serves them and turncat (k8s://...) needs them. The
// config discovery service gives it only to clients that went through the
// Kubernetes API's authentication and TLS (a port-forward, which arrives
// on the operator pod's loopback): docs/security.md.
func (g *GatewayResult) CDSConfigWithCredentials() ([]byte, error) {
	_, withCredentials, err := g.CDSConfigs()
	return withCredentials, err
}

// StunnerdJSON returns cfg in STUNner's v1 JSON with doc, Tern's document
// of cfg (YAML or JSON, as MarshalConfig writes it), under CDSTernKey. An
// error means doc is not a YAML or JSON object.
func StunnerdJSON(cfg *config.Config, doc []byte) ([]byte, error) {
	tern, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("dataplane config document: %w", err)
	}
	return stunnerdJSON(cfg, tern)
}

// CDSConfigs returns CDSConfig and CDSConfigWithCredentials together:
// tern-operator publishes both forms of every Gateway it renders. The
// ConfigMap's document is Config's JSON written as YAML (MarshalConfig), so
// instead of parsing that YAML back (a parse costs several times the rest)
// the document's JSON is made from Config itself, with the object keys
// sorted as the YAML parse gives them (TestCDSConfigGolden holds the served
// document to the ConfigMap's, byte for byte). Both are nil when the
// Gateway did not render.
func (g *GatewayResult) CDSConfigs() (public, withCredentials []byte, err error) {
	if g.Config == nil || g.ConfigMap == nil {
		return nil, nil, nil
	}
	tern, err := sortedJSON(g.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("dataplane config document: %w", err)
	}
	if public, err = stunnerdJSON(g.Config, tern); err != nil {
		return nil, nil, err
	}
	cfg := g.credentialed()
	if withCredentials, err = stunnerdJSON(&cfg, tern); err != nil {
		return nil, nil, err
	}
	return public, withCredentials, nil
}

// sortedJSON returns v's JSON with every object's keys in byte order, its
// numbers written as they were (json.Number).
func sortedJSON(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(tree) // maps marshal with sorted keys
}

// credentialed is a copy of Config with the password or shared secret of
// Secret inline.
func (g *GatewayResult) credentialed() config.Config {
	cfg := *g.Config
	if g.Secret != nil {
		cfg.Auth.Password = string(g.Secret.Data[CredentialsKeyPassword])
		cfg.Auth.SharedSecret = string(g.Secret.Data[CredentialsKeySharedSecret])
	}
	return cfg
}

// stunnerdJSON is StunnerdJSON with the document already JSON.
func stunnerdJSON(cfg *config.Config, tern []byte) ([]byte, error) {
	out := cdsConfig{
		Version: "v1",
		Admin: cdsAdmin{
			Name:     cfg.Admin.Name,
			LogLevel: cfg.Admin.LogLevel,
			// stunnerd reads an absent endpoint as its default and an empty
			// one as off: state Tern's either way.
			HealthCheckEndpoint: ptr(httpEndpoint(cfg.Admin.HealthAddress, "")),
		},
		Auth: cdsAuth{Type: cfg.Auth.Type, Realm: cfg.Auth.Realm, Credentials: map[string]string{}},
		Tern: tern,
	}
	if cfg.Admin.MetricsAddress != "" {
		out.Admin.MetricsEndpoint = httpEndpoint(cfg.Admin.MetricsAddress, "/metrics")
	}
	// Inline credentials (CDSConfigWithCredentials, or a standalone render)
	// are served; files are not read.
	switch cfg.Auth.Type {
	case config.AuthEphemeral:
		out.Auth.Credentials["secret"] = cfg.Auth.SharedSecret
	default:
		out.Auth.Credentials["username"] = cfg.Auth.Username
		out.Auth.Credentials["password"] = cfg.Auth.Password
	}
	for _, l := range cfg.Listeners {
		out.Listeners = append(out.Listeners, cdsListener{
			Name: l.Name, Protocol: string(l.Protocol),
			PublicAddr: stunnerdAddr(l.PublicAddress), PublicPort: l.PublicPort,
			Addr: stunnerdAddr(l.Address), Port: l.Port, Routes: l.Routes,
		})
	}
	for _, c := range cfg.Clusters {
		typ := strings.ToUpper(c.Type)
		if typ == "" {
			typ = "STATIC"
		}
		out.Clusters = append(out.Clusters, cdsCluster{Name: c.Name, Type: typ, Protocol: "udp", Endpoints: c.Endpoints})
	}
	return json.Marshal(out)
}

// stunnerdAddr writes Tern's address placeholders as stunnerd's relay
// address variable: on a hostNetwork pod the pod's address is the node's.
func stunnerdAddr(a string) string {
	switch a {
	case placeholder.PodIP, placeholder.NodeIP, placeholder.PodIPs:
		return stunnerdPodAddr
	}
	return a
}

// httpEndpoint turns host:port into stunnerd's http://host:port/path
// endpoint form, an address placeholder as host written as stunnerd's
// (stunnerdAddr); "" stays "".
func httpEndpoint(hostport, path string) string {
	if hostport == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "http://" + hostport + path
	}
	if p, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(p)
	}
	if h := stunnerdAddr(host); h != host {
		// stunnerd expands $STUNNER_ADDR in the endpoint's text:
		// JoinHostPort would bracket nothing here, so put it in as is.
		return "http://" + h + ":" + port + path
	}
	return "http://" + net.JoinHostPort(host, port) + path
}
