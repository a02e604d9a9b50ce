//go:build !linux

package offload

import "fmt"

// MaxPaths is the number of Paths the Linux maps hold.
const MaxPaths = 65536

// Offload is the handle Open returns; on this OS Open always fails.
type Offload struct{}

// Stats counts the packets that matched a Path but went to the socket
// path anyway (see the Linux implementation); always zero here.
type Stats struct {
	Expired, BadLength, Padding, TooBig, NoRoute, ForwardingDisabled, Errors uint64
}

// Open returns an error wrapping ErrUnsupported: eBPF is Linux-only.
func Open(cfg Config) (*Offload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: eBPF offload needs Linux", ErrUnsupported)
}

// Attached returns None.
func (o *Offload) Attached() Mode { return None }

// Interfaces returns nil.
func (o *Offload) Interfaces() []string { return nil }

// Hooks returns nil.
func (o *Offload) Hooks() map[string]Mode { return nil }

// InterfaceModes returns nil.
func (o *Offload) InterfaceModes() map[string]InterfaceMode { return nil }

// Put returns ErrUnsupported.
func (o *Offload) Put(p Path) error { return ErrUnsupported }

// Delete does nothing.
func (o *Offload) Delete(p Path) error { return nil }

// Counters calls fn for no slot.
func (o *Offload) Counters(fn func(slot uint32, c Counters)) {}

// Stats returns zeros.
func (o *Offload) Stats() Stats { return Stats{} }

// Close does nothing.
func (o *Offload) Close() error { return nil }

// Handover returns an error: there is nothing to hand over here.
func (o *Offload) Handover() (Handover, []int, error) { return Handover{}, nil, ErrUnsupported }

// Release does nothing.
func (o *Offload) Release() error { return nil }

// Adopt returns an error wrapping ErrUnsupported; no predecessor here
// has an offload to hand over.
func Adopt(h Handover, fds []int) (*Offload, error) {
	return nil, fmt.Errorf("%w: eBPF offload needs Linux", ErrUnsupported)
}

// Upgrade does nothing.
func (o *Offload) Upgrade() (bool, error) { return false, nil }

// Prune does nothing.
func (o *Offload) Prune(keep []Path) (int, error) { return 0, nil }
