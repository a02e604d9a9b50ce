package udpbatch

import (
	"errors"
	"fmt"
)

// GSOMaxSegments is the most datagrams one WriteGSO carries: the kernel's
// UDP_MAX_SEGMENTS on every Linux that has UDP_SEGMENT (newer kernels
// allow more, this many works everywhere).
const GSOMaxSegments = 64

// GSOMaxBytes bounds one WriteGSO's payload under the 64 KiB IP datagram
// limit (an IPv4 and a UDP header leave 65,507 bytes).
const GSOMaxBytes = 65000

// ErrGSO is returned by WriteGSO for a buffer it cannot send as one
// segmented message: seg < 1, more than GSOMaxSegments segments, or more
// than 65,000 bytes.
var ErrGSO = errors.New("udpbatch: not one UDP GSO message")

// gsoSegments checks p and seg for WriteGSO and returns the datagrams p
// makes: len(p)/seg rounded up.
func gsoSegments(p []byte, seg int) (int, error) {
	if seg < 1 || len(p) == 0 {
		return 0, fmt.Errorf("%w: %d bytes in segments of %d", ErrGSO, len(p), seg)
	}
	n := (len(p) + seg - 1) / seg
	if n > GSOMaxSegments || len(p) > GSOMaxBytes {
		return 0, fmt.Errorf("%w: %d bytes in %d segments of %d (at most %d segments, %d bytes)",
			ErrGSO, len(p), n, seg, GSOMaxSegments, GSOMaxBytes)
	}
	return n, nil
}
