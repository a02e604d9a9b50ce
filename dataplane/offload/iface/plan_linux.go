package iface

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// A Plan is what the offload does on one interface, decided before
// anything is loaded: how packets relayed from it leave (EgressFor's
// answer).
type Plan struct {
	Interface *net.Interface
	Egress    Egress
	// Why is Egress's reason as a short code for metrics, Reason the
	// same in words (EgressFor).
	Why, Reason string
}

// Plans looks up each named interface and decides its egress (EgressFor,
// through h, for the families in use v4 and v6). With auto (the offload's
// Auto engine) it leaves out lo and the interfaces where no egress works,
// and returns each as "name (why)" in skipped; otherwise every interface
// gets a Plan. An interface that does not exist is an error naming it.
func Plans(h *netlink.Handle, names []string, auto, v4, v6 bool) (plans []Plan, skipped []string, err error) {
	for _, name := range names {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, nil, fmt.Errorf("interface %q: %w", name, err)
		}
		if ifc.Flags&net.FlagLoopback != 0 && auto {
			// On lo every relayed packet goes from this host to itself:
			// the host's own test or benchmark traffic, which Auto does
			// not take over (ternbench's "ternd" row stays the socket
			// path, and tests sharing the host's lo see no program they
			// did not ask for). Forced TC relays it in the kernel.
			skipped = append(skipped, name+" (loopback: Auto leaves it to the sockets; --offload-engine TC relays it in the kernel)")
			continue
		}
		e, code, why, usable := EgressFor(h, ifc, v4, v6)
		if !usable && auto {
			// bpf_fib_lookup refuses to route a packet that arrived on an
			// interface with forwarding off, and packets may leave by
			// another interface, so there the programs would only look
			// at every packet and pass it. Auto leaves such interfaces
			// alone (XDP and TC attach as asked, and count
			// ForwardingDisabled).
			skipped = append(skipped, name+" ("+why+")")
			continue
		}
		plans = append(plans, Plan{ifc, e, code, why})
	}
	return plans, skipped, nil
}
