package core

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// replySink records replies; Forward is not reached by these results.
type replySink struct {
	replies [][]byte
	err     error
}

func (s *replySink) Reply(msg []byte, _ netip.AddrPort) error {
	if s.err != nil {
		return s.err
	}
	s.replies = append(s.replies, msg)
	return nil
}

func (s *replySink) Forward(int, []byte, netip.AddrPort) error { return errors.New("unexpected") }

func TestDeliverCounts(t *testing.T) {
	client := netip.MustParseAddrPort("192.0.2.1:5000")
	broken := errors.New("broken pipe")
	for _, tc := range []struct {
		name      string
		res       turn.Result
		sinkErr   error
		off       bool
		wantErr   error
		tx, bytes uint64
		drops     uint64
	}{
		{"reply", turn.Result{Kind: turn.Reply, Reply: make([]byte, 32)}, nil, false, nil, 1, 32, 0},
		{"reply, counters off", turn.Result{Kind: turn.Reply, Reply: make([]byte, 32)}, nil, true, nil, 0, 0, 0},
		{"reply not sent", turn.Result{Kind: turn.Reply, Reply: make([]byte, 32)}, broken, false, broken, 0, 0, 0},
		{"drop", turn.Result{Kind: turn.Drop, Drop: turn.DropMalformed}, nil, false, nil, 0, 0, 1},
		{"drop, counters off", turn.Result{Kind: turn.Drop, Drop: turn.DropMalformed}, nil, true, nil, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				st  stats.Worker
				n   Counts
				sum stats.Sum
			)
			sink := &replySink{err: tc.sinkErr}
			n.Received(100)
			if err := Deliver(&tc.res, client, sink, &st, &n); !errors.Is(err, tc.wantErr) {
				t.Fatalf("Deliver = %v, want %v", err, tc.wantErr)
			}
			n.Flush(&st, tc.off)
			st.AddTo(&sum)
			wantRx := uint64(1)
			if tc.off {
				wantRx = 0
			}
			if sum.Rx != wantRx || sum.Tx != tc.tx || sum.TxBytes != tc.bytes || sum.Drops[turn.DropMalformed] != tc.drops {
				t.Fatalf("counted rx %d, tx %d (%d bytes), drops %d; want rx %d, tx %d (%d bytes), drops %d",
					sum.Rx, sum.Tx, sum.TxBytes, sum.Drops[turn.DropMalformed], wantRx, tc.tx, tc.bytes, tc.drops)
			}
			if n != (Counts{}) {
				t.Fatal("Flush left counts behind")
			}
		})
	}
}
