package offload

import "errors"

// Handover describes an attached Offload for the successor process of a
// hand-over (ternd --takeover): which of the descriptors that travel with
// it (by SCM_RIGHTS, beside the sockets) is which. The kernel objects
// stay alive across the switch because both processes hold descriptors of
// them: the maps with their entries and counters, the programs, and the
// bpf_links (tcx, XDP) that keep the programs attached. A clsact filter
// needs no descriptor: the kernel keeps it until it is removed.
type Handover struct {
	// Maps are the maps' names (the programs' section names), one
	// descriptor each, in this order.
	Maps []string
	// Programs are the programs' names, one descriptor each, after the
	// maps'.
	Programs []string
	// Interfaces are the attached interfaces, in the order their link
	// descriptors follow the programs'.
	Interfaces []HandoverInterface
}

// HandoverInterface is one attached interface of a Handover.
type HandoverInterface struct {
	// Name and Index identify the interface.
	Name  string
	Index int
	// Mode is how the programs run there.
	Mode InterfaceMode
	// Link: a bpf_link descriptor (tcx, XDP) follows; false for a
	// clsact filter.
	Link bool
	// OwnsQdisc: the clsact qdisc was added by Tern, so that the process
	// that finally detaches removes it too.
	OwnsQdisc bool
}

// FDs returns how many descriptors travel with h.
func (h Handover) FDs() int {
	n := len(h.Maps) + len(h.Programs)
	for _, i := range h.Interfaces {
		if i.Link {
			n++
		}
	}
	return n
}

// ErrIncompatible wraps Adopt's error when the running programs' maps are
// not the ones this binary's programs were built for: the successor
// refuses the hand-over and the old process serves on.
var ErrIncompatible = errors.New("offload: maps incompatible")
