// Package udpio is Tern's fast UDP socket layer: batches of datagrams moved
// with one recvmmsg or sendmmsg call, UDP generic segmentation offload for
// runs of same-size datagrams, the socket address codec those calls use,
// and the socket setup (SO_REUSEPORT, buffer sizes) of listener and relay
// sockets. Nothing in it allocates per datagram.
//
// The dataplane's listener and relay workers and the bench harness's load
// generator and forwarder all build on it, so the harness measures servers
// with the same system-call pattern the dataplane uses.
//
// Everything but Mode, SendTo and RawSendTo is Linux-only; other platforms
// use the portable paths of the packages that import this one.
package udpio

// Mode is how a worker waits for packets.
type Mode string

const (
	// Threads: each worker blocks in recvmmsg or epoll_wait in a thread of
	// its own (see internal/sysblock for the scheduler side).
	Threads Mode = "threads"
	// Poller: non-blocking sockets parked in the Go netpoller, which costs
	// a scheduler wake-up per batch.
	Poller Mode = "poller"
)

// BatchSize is how many datagrams one recvmmsg or sendmmsg call of a
// dataplane worker moves.
const BatchSize = 64
