package config

import (
	"fmt"

	"github.com/tern-gw/tern/dataplane/config/placeholder"
)

// expandPlaceholders replaces the address placeholders of package
// placeholder in the address fields of c: a value that is exactly one in
// each listener's address and publicAddress and the relay's address and
// publicAddress (placeholder.Expand; relay.address may also be
// $(POD_IPS)), and a host that is exactly one in admin.healthAddress and
// admin.metricsAddress (placeholder.ExpandHost). Only address fields are
// looked at. A nil getenv sets no variable. Then relay.nodePublicAddresses
// is applied for the node getenv names as NODE_NAME. It returns an error
// naming the first field whose variable is empty.
func (c *Config) expandPlaceholders(getenv func(string) string) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	type field struct {
		name string
		v    *string
		host bool
	}
	var fields []field
	for i := range c.Listeners {
		l := &c.Listeners[i]
		fields = append(fields, field{fmt.Sprintf("listeners[%d].address", i), &l.Address, false},
			field{fmt.Sprintf("listeners[%d].publicAddress", i), &l.PublicAddress, false})
	}
	fields = append(fields, field{"admin.healthAddress", &c.Admin.HealthAddress, true},
		field{"admin.metricsAddress", &c.Admin.MetricsAddress, true},
		field{"relay.address", &c.Relay.Address, false}, field{"relay.publicAddress", &c.Relay.PublicAddress, false})
	for _, f := range fields {
		if f.v == &c.Relay.Address && *f.v == placeholder.PodIPs {
			ips, err := placeholder.PodIPList(f.name, getenv)
			if err != nil {
				return err
			}
			c.Relay.setPodIPs(ips)
			continue
		}
		expand := placeholder.Expand
		if f.host {
			expand = placeholder.ExpandHost
		}
		v, err := expand(f.name, *f.v, getenv)
		if err != nil {
			return err
		}
		*f.v = v
	}
	c.Relay.applyNodePublicAddress(getenv(placeholder.EnvNodeName))
	return nil
}

// setPodIPs makes the first of the pod's IPs relay.address and puts the
// others first in relay.extraAddresses (placeholder.PodIPs).
func (r *Relay) setPodIPs(ips []string) {
	r.Address = ips[0]
	extra := make([]RelayAddress, 0, len(ips)-1+len(r.ExtraAddresses))
	for _, ip := range ips[1:] {
		extra = append(extra, RelayAddress{Address: ip})
	}
	r.ExtraAddresses = append(extra, r.ExtraAddresses...)
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
