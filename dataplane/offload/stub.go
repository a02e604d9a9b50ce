package offload

import "fmt"

// Offload is a loaded and attached set of offload programs and their maps.
// Its methods are safe for concurrent use.
//
// This file is the placeholder API every platform implements; the Linux
// implementation replaces it.
type Offload struct{}

// Open loads the programs, creates the maps and attaches to cfg's
// interfaces. It returns an error wrapping ErrUnsupported where BPF is
// refused or the kernel lacks what the programs need.
func Open(cfg Config) (*Offload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: not implemented", ErrUnsupported)
}

// Attached returns the hook the programs run on: XDP or TC.
func (o *Offload) Attached() Mode { return None }

// Put installs or replaces p (both directions). It returns an error when
// the maps are full or p is not a valid path (mixed address families,
// channel number out of range).
func (o *Offload) Put(p Path) error { return ErrUnsupported }

// Delete withdraws p (both directions); a path not installed is no error.
func (o *Offload) Delete(p Path) error { return nil }

// Counters calls fn for every counter slot that has counted something.
func (o *Offload) Counters(fn func(slot uint32, c Counters)) {}

// Close detaches the programs and frees the maps. Programs are attached
// through bpf_links owned by this process, so a crash detaches them too.
func (o *Offload) Close() error { return nil }
