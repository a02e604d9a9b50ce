// Package offload holds the end-to-end tests of the eBPF ChannelData fast
// path: ternd with offload on in a network namespace between a client's
// and the peers' namespaces, joined by veth pairs the tests create and
// remove, with the tc program attached by tcx and by a clsact qdisc; and
// ternd on a one-interface namespace with forwarding off (same-interface
// mode). They need root (CI runs them as root); elsewhere they skip with
// a message, or fail under CI=true.
package offload
