// Package bench is the library behind ternbench: it drives real TURN
// allocations against any TURN server given by address and static
// credentials (and against the raw forwarder, the ceiling), and measures
// what docs/performance.md describes:
//
//   - throughput: offered and delivered packets/s, loss %, and the server's
//     CPU time per relayed packet in µs (from /proc/PID/stat);
//   - latency: round-trip p50/p90/p99/p99.9 in µs through an echoing peer;
//   - allocs: authenticated Allocate + Refresh(0) cycles per second;
//   - memory: the server's resident bytes per held allocation.
//
// Within every step the targets are measured one after another, and the
// repeats rotate their order, so drift on the shared machine hits all alike.
// Every step is bounded both in packets (or operations) and in seconds.
package bench
