// Package kernel answers what the eBPF offload (dataplane/offload) asks of
// the running Linux kernel and of the calling thread before and after it
// loads its programs: the kernel's version (AtLeast), the thread's
// capabilities (HasCapability), and whether an error means the kernel
// refused or lacks something (Refused), on which Auto falls back to the
// socket path. Linux only: elsewhere the package is empty.
package kernel
