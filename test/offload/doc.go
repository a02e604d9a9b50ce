// Package offload holds the end-to-end tests of the eBPF ChannelData fast
// path: ternd with offload on in a network namespace between a client's
// and the peers' namespaces, joined by veth pairs the tests create and
// remove. They need root (CI runs them as root); elsewhere they skip with
// a message, or fail under CI=true.
package offload
