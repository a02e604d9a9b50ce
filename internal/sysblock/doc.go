// Package sysblock keeps goroutines that wait for packets in blocking
// system calls (recvmmsg, epoll_wait) cheap for the Go runtime: cheaper, on
// Linux at packet rates up to ~50k packets/s, than parking them in the
// netpoller, which costs a scheduler wake-up per batch.
//
// Two things go wrong with a naive blocking worker, and this package fixes
// both: the worker holds a P while blocked, so with as many workers as Ps a
// woken worker waits for the runtime's monitor to free one (Enter adds a P
// per worker); and a worker that never reschedules looks stuck to that
// monitor, which then polls every 20 µs (Yielder reschedules now and then).
// ternd's dataplane and the bench forwarder use it.
package sysblock
