// Package tcattach attaches an eBPF program (an *ebpf.Program of type
// SchedCLS) to a network interface's tc ingress hook, the two ways Linux
// offers: tcx (TCX: a bpf_link, Linux 6.6 on, which the kernel removes
// when the process that owns it exits) and a clsact qdisc with a
// direct-action bpf filter added through netlink (Clsact: Linux 4.5 on,
// which outlives the process until Close, or the next Clsact, removes
// it). Each returns a Detacher; TCXRefused tells a kernel without tcx from
// other errors. Which method to use is the caller's choice
// (dataplane/offload's Attach). Linux only: elsewhere the package is
// empty but for Detacher.
package tcattach

// Detacher is an attachment that Close removes: a bpf_link (tcx, and
// XDP's, which dataplane/offload keeps beside them) or a clsact filter.
type Detacher interface{ Close() error }
