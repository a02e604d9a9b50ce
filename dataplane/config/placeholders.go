package config

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// Address placeholders. A pod's IP is not known when the operator renders
// a config, so an address field may hold one of these instead; Parse
// replaces it with the value of an environment variable, which the
// rendered Deployment fills from the downward API.
const (
	// PlaceholderPodIP stands for the pod's IP: environment variable
	// POD_IP (status.podIP).
	PlaceholderPodIP = "$(POD_IP)"
	// PlaceholderNodeIP stands for the node's IP: environment variable
	// NODE_IP (status.hostIP).
	PlaceholderNodeIP = "$(NODE_IP)"
	// PlaceholderPodIPs stands for every IP of the pod, one per family on
	// a dual-stack cluster: environment variable POD_IPS (status.podIPs,
	// comma-separated), else POD_IP. It is valid in relay.address only:
	// the first IP becomes relay.address, the others are put first in
	// relay.extraAddresses, so the relay has an address of each family
	// the pod has.
	PlaceholderPodIPs = "$(POD_IPS)"
)

// EnvNodeName is the environment variable holding the name of the node
// the dataplane runs on (spec.nodeName), which selects its entry of
// relay.nodePublicAddresses.
const EnvNodeName = "NODE_NAME"

// placeholderEnv maps each placeholder to the environment variable holding
// its value.
var placeholderEnv = map[string]string{
	PlaceholderPodIP:  "POD_IP",
	PlaceholderNodeIP: "NODE_IP",
}

// expandPlaceholders replaces, in the address fields of c (each listener's
// address and publicAddress, the relay's address and publicAddress), a
// value that is exactly a placeholder with the value getenv returns for its
// variable, and in admin.healthAddress and admin.metricsAddress a host that
// is exactly one ("$(POD_IP):8086", so that the operator can bind the
// endpoints to the pod's address); a nil getenv sets no variable. Only whole values in address
// fields are replaced, so a password that happens to contain "$(" is never
// touched. Then relay.nodePublicAddresses is applied for the node getenv
// names as NODE_NAME. It returns an error naming the first field whose
// variable is empty.
func (c *Config) expandPlaceholders(getenv func(string) string) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	expand := func(field string, v *string) error {
		env, ok := placeholderEnv[*v]
		if !ok {
			return nil
		}
		val := getenv(env)
		if val == "" {
			return fmt.Errorf("%s: %s needs the environment variable %s", field, *v, env)
		}
		*v = val
		return nil
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if err := expand(fmt.Sprintf("listeners[%d].address", i), &l.Address); err != nil {
			return err
		}
		if err := expand(fmt.Sprintf("listeners[%d].publicAddress", i), &l.PublicAddress); err != nil {
			return err
		}
	}
	for _, a := range []struct {
		field string
		v     *string
	}{{"admin.healthAddress", &c.Admin.HealthAddress}, {"admin.metricsAddress", &c.Admin.MetricsAddress}} {
		host, port, err := net.SplitHostPort(*a.v)
		if err != nil {
			continue // validation names it
		}
		if _, ok := placeholderEnv[host]; !ok {
			continue
		}
		if err := expand(a.field, &host); err != nil {
			return err
		}
		*a.v = net.JoinHostPort(host, port)
	}
	if c.Relay.Address == PlaceholderPodIPs {
		if err := c.Relay.expandPodIPs(getenv); err != nil {
			return err
		}
	}
	if err := expand("relay.address", &c.Relay.Address); err != nil {
		return err
	}
	if err := expand("relay.publicAddress", &c.Relay.PublicAddress); err != nil {
		return err
	}
	c.Relay.applyNodePublicAddress(getenv(EnvNodeName))
	return nil
}

// expandPodIPs replaces relay.address $(POD_IPS) with the pod's IPs
// (PlaceholderPodIPs), or returns an error when neither POD_IPS nor POD_IP
// holds one. Entries of POD_IPS are trimmed; empty ones are skipped.
func (r *Relay) expandPodIPs(getenv func(string) string) error {
	var ips []string
	for _, ip := range strings.Split(getenv("POD_IPS"), ",") {
		if ip = strings.TrimSpace(ip); ip != "" && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		if ip := strings.TrimSpace(getenv("POD_IP")); ip != "" {
			ips = []string{ip}
		}
	}
	if len(ips) == 0 {
		return fmt.Errorf("relay.address: %s needs the environment variable POD_IPS or POD_IP", PlaceholderPodIPs)
	}
	r.Address = ips[0]
	extra := make([]RelayAddress, 0, len(ips)-1+len(r.ExtraAddresses))
	for _, ip := range ips[1:] {
		extra = append(extra, RelayAddress{Address: ip})
	}
	r.ExtraAddresses = append(extra, r.ExtraAddresses...)
	return nil
}

// applyNodePublicAddress sets PublicAddress to the entry of node in
// NodePublicAddresses, if it has one. A node without an entry (it has no
// ExternalIP) keeps PublicAddress, and so advertises Address when that is
// empty; so does a process that does not know its node.
func (r *Relay) applyNodePublicAddress(node string) {
	if node == "" {
		return
	}
	if a, ok := r.NodePublicAddresses[node]; ok {
		r.PublicAddress = a
	}
}
