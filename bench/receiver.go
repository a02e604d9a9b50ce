package bench

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/bench/udpbatch"
)

// stampLen is the bytes a latency probe writes at the start of its
// payload: a sequence number and the send time in ns since the step began.
const stampLen = 16

// receivers read what the servers relay back to the sessions (echo mode):
// they count datagrams and, for latency probes, record round-trip times.
type receivers struct {
	wg       sync.WaitGroup
	packets  atomic.Uint64
	base     time.Time      // stamps are ns since base
	rtts     []atomic.Int64 // by sequence number; 0 = not received
	received atomic.Uint64  // probes matched to a sequence number
}

// start launches one reader per session. With rtts > 0 it parses stamps of
// sequence numbers below rtts.
func (r *receivers) start(ss []*session, rtts int, base time.Time) {
	r.base = base
	if rtts > 0 {
		r.rtts = make([]atomic.Int64, rtts)
	}
	for _, s := range ss {
		r.wg.Add(1)
		go r.read(s)
	}
}

// stop makes every reader return and waits for them.
func (r *receivers) stop(ss []*session) {
	for _, s := range ss {
		s.stopReading()
	}
	r.wg.Wait()
}

func (r *receivers) read(s *session) {
	defer r.wg.Done()
	in := make([]udpbatch.Message, batchSize)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for {
		n, err := s.conn.ReadBatch(in)
		if err != nil {
			return
		}
		r.packets.Add(uint64(n))
		if r.rtts == nil {
			continue
		}
		now := time.Since(r.base).Nanoseconds()
		for _, m := range in[:n] {
			p := m.Buf[:m.N]
			if s.tc != nil {
				var ok bool
				if p, ok = turnclient.Payload(p); !ok {
					continue
				}
			}
			if len(p) < stampLen {
				continue
			}
			seq := binary.BigEndian.Uint64(p)
			sentAt := int64(binary.BigEndian.Uint64(p[8:]))
			if seq < uint64(len(r.rtts)) && r.rtts[seq].CompareAndSwap(0, max(1, now-sentAt)) {
				r.received.Add(1)
			}
		}
	}
}
