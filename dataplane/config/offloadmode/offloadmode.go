// Package offloadmode names the kernel fast path's settings in the
// dataplane config contract (the config's offload section): which engine
// (STUNner's Dataplane.spec.offloadEngine values) and how the tc program
// attaches. It imports nothing of Tern, so the operator and ternd share it.
package offloadmode

import (
	"fmt"
	"strings"
)

// Engines of Settings.Engine: STUNner's Dataplane.spec.offloadEngine
// values (its TCMux is read as TC).
const (
	None = "None"
	Auto = "Auto"
	XDP  = "XDP"
	TC   = "TC"
)

// Settings selects the eBPF ChannelData fast path: the kernel relays
// ChannelData of the channel bindings the TURN engine reports, between a
// TURN-UDP listener's clients and their peers, without the packets reaching
// a socket.
type Settings struct {
	// Engine is Auto (the default: XDP where the driver supports it, tc
	// elsewhere, and the socket path with a log line where BPF is refused,
	// the kernel is too old or forwarding is off), None (every packet
	// through sockets), XDP or TC (that hook or ternd fails to start).
	// Case-insensitive; TCMux is read as TC. SetDefaults normalizes the
	// spelling and leaves "" alone: use EngineMode. tern-operator always
	// renders it (None unless the Dataplane asks for offload, since
	// offload needs a privileged container).
	Engine string `json:"engine,omitempty"`
	// Interfaces names the network interfaces to attach to; empty means
	// those that carry a TURN-UDP listener's or a relay address.
	Interfaces []string `json:"interfaces,omitempty"`
	// Attach is how the tc program attaches: Auto (the default: tcx where
	// the kernel has it, Linux 6.6 on, else a clsact qdisc with a
	// direct-action bpf filter), TCX or Clsact (that way or ternd fails
	// to start). Case-insensitive; SetDefaults normalizes the spelling
	// and leaves "" alone: use AttachMode.
	Attach string `json:"attach,omitempty"`
}

// Attach methods of Settings.Attach.
const (
	AttachAuto   = "Auto"
	AttachTCX    = "TCX"
	AttachClsact = "Clsact"
)

// AttachMode returns Attach normalized: AttachAuto when unset or
// invalid (Validate reports that).
func (o Settings) AttachMode() string {
	a, err := NormalizeAttach(o.Attach)
	if err != nil {
		return AttachAuto
	}
	return a
}

// NormalizeAttach maps an attach method, case-insensitively, to
// one of the Attach* constants ("" is AttachAuto); any other
// string is an error naming the accepted values.
func NormalizeAttach(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return AttachAuto, nil
	case "tcx":
		return AttachTCX, nil
	case "clsact":
		return AttachClsact, nil
	}
	return "", fmt.Errorf("must be Auto, TCX or Clsact, got %q", s)
}

// EngineMode returns Engine normalized: Auto when unset (the
// benchmark in BENCHMARKS.md, "Offload", showed that it pays), None
// when invalid (Validate reports that).
func (o Settings) EngineMode() string {
	if o.Engine == "" {
		return Auto
	}
	e, err := NormalizeEngine(o.Engine)
	if err != nil {
		return None
	}
	return e
}

// NormalizeEngine maps an engine name, case-insensitively, to one of
// the engine constants ("" is None, "TCMux" TC); any other
// string is an error naming the accepted values.
func NormalizeEngine(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return None, nil
	case "auto":
		return Auto, nil
	case "xdp":
		return XDP, nil
	case "tc", "tcmux":
		return TC, nil
	}
	return "", fmt.Errorf("must be None, Auto, XDP or TC, got %q", s)
}
