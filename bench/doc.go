// Package bench is the library behind ternbench: it drives real TURN
// allocations against any TURN server given by address and static
// credentials (and against the raw forwarder, the ceiling), and measures
// what docs/performance.md describes:
//
//   - flows: WebRTC-shaped load — client → peer, peer → client or both
//     ways (an echoing peer), flows interleaved one datagram at a time or in
//     bursts, over TURN-UDP, TCP, TLS or DTLS — with the server's CPU and the
//     whole machine's (/proc/stat, minus a no-server baseline) per relayed
//     packet, loss, and round trips; the webrtc profile on top of it (K
//     audio/video participants, downstream 3× upstream). Usage:
//     ternbench flows -launch ternd,coturn,pion -direction c2p,p2c,both
//     -transport udp,tcp,tls,dtls -flows 64 -rates 20k; ternbench webrtc
//     -launch ternd,coturn,pion -allocations 1000,5000 (docs/performance.md);
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
