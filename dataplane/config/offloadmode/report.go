package offloadmode

// Reasons a pod's offload is or is not active (Report.Reason), also the
// reasons of the Gateway condition OffloadActive that tern-operator sums
// from its pods' reports (docs/offload-control.md).
const (
	// ReasonAttached: the programs run on every interface in
	// Report.Interfaces.
	ReasonAttached = "Attached"
	// ReasonNotRequested: the engine is None.
	ReasonNotRequested = "NotRequested"
	// ReasonMissingCapability: the kernel refused BPF or the attachment
	// for want of a privilege (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, or
	// RLIMIT_MEMLOCK before Linux 5.11).
	ReasonMissingCapability = "MissingCapability"
	// ReasonAttachRefused: the programs loaded but an interface refused
	// the hook (tcx, clsact or XDP).
	ReasonAttachRefused = "AttachRefused"
	// ReasonNoInterface: no interface carries a listener or relay
	// address, or Auto found none it can relay on (forwarding off and
	// routes leaving by other interfaces).
	ReasonNoInterface = "NoInterface"
	// ReasonUnsupported: the kernel lacks a program type, map type or
	// helper the programs need, or ternd runs on another OS.
	ReasonUnsupported = "Unsupported"
	// ReasonFailed: the programs were attached and a reopen for new
	// listeners failed for a reason not listed above.
	ReasonFailed = "Failed"
)

// ReportPath is where ternd serves its Report as JSON, on the health
// address next to /ready, so that tern-operator can read whether a pod's
// offload runs without the pod needing API credentials.
const ReportPath = "/offload"

// Report is what ternd serves at ReportPath: the engine asked for, the
// hook attached and why, and how each attached interface runs.
type Report struct {
	// Requested is the engine in force: None, Auto, XDP or TC.
	Requested string `json:"requested"`
	// Attached is the hook in use (XDP or TC), None when every packet
	// goes through sockets.
	Attached string `json:"attached"`
	// Active is Attached != None.
	Active bool `json:"active"`
	// Reason is one of the Reason* constants.
	Reason string `json:"reason"`
	// Message says why in words: the kernel's or the attachment's error
	// after a fallback; empty when attached.
	Message string `json:"message,omitempty"`
	// Interfaces is how the programs run on each attached interface.
	Interfaces map[string]ReportInterface `json:"interfaces,omitempty"`
}

// ReportInterface is how the programs run on one interface.
type ReportInterface struct {
	// Hook is XDP or TC.
	Hook string `json:"hook"`
	// Attach is tcx, clsact, xdp or xdp_generic.
	Attach string `json:"attach"`
	// Egress is fib or same_interface.
	Egress string `json:"egress"`
	// Why is the egress's short reason (forwarding_on, single_interface, ...).
	Why string `json:"why"`
}
