package bench

import (
	"context"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/udpbatch"
)

// sendPaced offers rate packets/s spread over the sessions for at most dur
// and at most limit packets, using senders goroutines (each owns a share of
// the sessions and of the rate). Every session sends its own pre-built
// frame with sendmmsg batches; nothing is built or allocated per packet.
//
// Pacing is by schedule: at time t since the start, rate·t packets should
// have left; each loop sends what is due in per-session bursts of at most
// batchSize, so bursts stay below a millisecond's worth at the rates that
// matter. It returns packets sent and the time sending took.
func sendPaced(ctx context.Context, ss []*session, rate float64, dur time.Duration, limit uint64, senders int) (uint64, time.Duration) {
	senders = max(1, min(senders, len(ss)))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total uint64
	)
	start := time.Now()
	for g := 0; g < senders; g++ {
		var mine []*session
		for i := g; i < len(ss); i += senders {
			mine = append(mine, ss[i])
		}
		share := float64(len(mine)) / float64(len(ss))
		myLimit := uint64(float64(limit) * share)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := paceLoop(ctx, mine, rate*share, start, dur, myLimit)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, time.Since(start)
}

func paceLoop(ctx context.Context, ss []*session, rate float64, start time.Time, dur time.Duration, limit uint64) uint64 {
	msgs := make([][]udpbatch.Message, len(ss))
	for i, s := range ss {
		msgs[i] = make([]udpbatch.Message, batchSize)
		for j := range msgs[i] {
			msgs[i][j] = udpbatch.Message{Buf: s.frame, Addr: s.target.Addr}
		}
	}
	var sent uint64
	next := 0
	for sent < limit {
		el := time.Since(start)
		if el >= dur || ctx.Err() != nil {
			break
		}
		want := uint64(el.Seconds()*rate) + 1
		if want > limit {
			want = limit
		}
		if want <= sent {
			// Sleep until the next packet is due; the runtime's timer
			// granularity makes this at least ~50 µs, which only batches more.
			time.Sleep(time.Duration(float64(sent)/rate*float64(time.Second)) - el)
			continue
		}
		due := min(want-sent, uint64(len(ss)*batchSize))
		per := max(1, min(due/uint64(len(ss)), batchSize))
		for due > 0 {
			k := min(per, due)
			n, err := ss[next].conn.WriteBatch(msgs[next][:k])
			sent += uint64(n)
			due -= k
			next = (next + 1) % len(ss)
			if err != nil {
				// A full socket buffer blocks rather than fails; an error
				// here is a dead socket, and the lost packets show as loss.
				sent += k - uint64(n)
			}
		}
	}
	return sent
}
