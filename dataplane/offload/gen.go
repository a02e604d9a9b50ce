package offload

// The eBPF objects and their Go loaders (tern_bpfel.go, tern_bpfeb.go and
// the .o files) are committed, so building needs no clang; `make generate`
// (go generate) rebuilds them from bpf/offload.c and needs Debian's clang,
// libbpf-dev (bpf/bpf_helpers.h) and linux-libc-dev.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel,bpfeb -type c2p_key -type c2p_val -type p2c_key -type p2c_val -type slot_counters -type iface -type local_key tern bpf/offload.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
