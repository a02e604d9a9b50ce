// Package placeholder holds the address placeholders of a dataplane config.
// A pod's IP is not known when tern-operator renders a config, so an
// address field may hold one of these instead; config.Parse replaces it
// with the value of an environment variable, which the rendered Deployment
// fills from the downward API. The renderer writes the placeholders and the
// config expands them, so both sides take the spellings from here. It
// imports nothing of Tern.
package placeholder

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// The placeholders.
const (
	// PodIP stands for the pod's IP: environment variable POD_IP
	// (status.podIP).
	PodIP = "$(POD_IP)"
	// NodeIP stands for the node's IP: environment variable NODE_IP
	// (status.hostIP).
	NodeIP = "$(NODE_IP)"
	// PodIPs stands for every IP of the pod, one per family on a
	// dual-stack cluster: environment variable POD_IPS (status.podIPs,
	// comma-separated), else POD_IP. It is valid in relay.address only:
	// the first IP becomes relay.address, the others are put first in
	// relay.extraAddresses, so the relay has an address of each family the
	// pod has (PodIPList).
	PodIPs = "$(POD_IPS)"
)

// EnvNodeName is the environment variable holding the name of the node
// the dataplane runs on (spec.nodeName), which selects its entry of
// relay.nodePublicAddresses.
const EnvNodeName = "NODE_NAME"

// env maps each single-address placeholder to the environment variable
// holding its value.
var env = map[string]string{
	PodIP:  "POD_IP",
	NodeIP: "NODE_IP",
}

// Expand returns v, or, when v is exactly PodIP or NodeIP, the value getenv
// returns for its variable. Only a whole value is a placeholder, so a
// password that happens to contain "$(" is never touched. An empty
// variable is an error that names field ("relay.address: $(POD_IP) needs
// the environment variable POD_IP").
func Expand(field, v string, getenv func(string) string) (string, error) {
	name, ok := env[v]
	if !ok {
		return v, nil
	}
	val := getenv(name)
	if val == "" {
		return "", fmt.Errorf("%s: %s needs the environment variable %s", field, v, name)
	}
	return val, nil
}

// ExpandHost is Expand for the host of a host:port value ("$(POD_IP):8086",
// so that the operator can bind an endpoint to the pod's address). A value
// that is not host:port is returned as it is, for validation to name.
func ExpandHost(field, hostport string, getenv func(string) string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, nil
	}
	if _, ok := env[host]; !ok {
		return hostport, nil
	}
	if host, err = Expand(field, host, getenv); err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// PodIPList returns the pod's IPs that PodIPs stands for: the entries of
// POD_IPS, trimmed, without empty ones or repeats, else POD_IP. Neither
// holding an IP is an error naming field.
func PodIPList(field string, getenv func(string) string) ([]string, error) {
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
		return nil, fmt.Errorf("%s: %s needs the environment variable POD_IPS or POD_IP", field, PodIPs)
	}
	return ips, nil
}
