//go:build !linux

package udpbatch

// sys is empty off Linux: the portable fallback moves one datagram per
// system call, which is enough to build and test the harness there.
type sys struct{}

func (c *Conn) init(int) error { return nil }

// ReadBatch blocks until one datagram arrives and returns 1.
func (c *Conn) ReadBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	n, addr, err := c.uc.ReadFromUDPAddrPort(ms[0].Buf)
	if err != nil {
		return 0, err
	}
	ms[0].N, ms[0].Addr = n, addr
	return 1, nil
}

// WriteBatch sends every message of ms, one system call each.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	for i := range ms {
		if _, err := c.uc.WriteToUDPAddrPort(ms[i].Buf, ms[i].Addr); err != nil {
			return i, err
		}
	}
	return len(ms), nil
}
