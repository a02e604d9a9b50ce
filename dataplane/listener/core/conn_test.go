package core

import (
	"bytes"
	"net"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// recordingWriter is a RelayWriter that keeps each write it is given.
type recordingWriter struct {
	writes [][]byte
	drop   bool
}

func (w *recordingWriter) WriteRelayed(msg []byte) (bool, error) {
	if w.drop {
		return true, nil
	}
	w.writes = append(w.writes, append([]byte(nil), msg...))
	return false, nil
}

// countingOutbox is an Outbox that counts what it is given.
type countingOutbox struct{ queued, flushed int }

func (o *countingOutbox) Queue(int, *Conn, []byte) bool { o.queued++; return o.queued == 1 }
func (o *countingOutbox) Flush(int)                     { o.flushed++ }

func testConn(t *testing.T) *Conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	var base Base
	base.Init(Env{}, config.Listener{Name: "tcp"}, turn.ProtoTCP, nil)
	return base.NewConn(a)
}

// TestQueueToClient: what relay workers queue for a stream client leaves
// in one write at the flush, the first queue since the last flush alone
// asks for one, a queue past queueFlushAt writes what waits first, and a
// client too slow for the write has every queued message counted as
// dropped. A connection with an Outbox queues there.
func TestQueueToClient(t *testing.T) {
	msgs := [][]byte{[]byte("one."), []byte("two.."), []byte("three")}
	for _, tc := range []struct {
		name   string
		sizes  []int // message sizes; 0 takes msgs
		drop   bool
		writes []int // bytes of each write
		tx     uint64
		drops  uint64
	}{
		{name: "three small", writes: []int{14}, tx: 3},
		{name: "past queueFlushAt", sizes: []int{queueFlushAt / 2, queueFlushAt / 2, 8}, writes: []int{queueFlushAt, 8}, tx: 3},
		{name: "dropped", drop: true, drops: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConn(t)
			w := &recordingWriter{drop: tc.drop}
			c.Relay = w
			var want []byte
			queue := msgs
			if tc.sizes != nil {
				queue = nil
				for i, n := range tc.sizes {
					queue = append(queue, bytes.Repeat([]byte{byte('a' + i)}, n))
				}
			}
			for i, m := range queue {
				if first := c.QueueToClient(0, m); first != (i == 0) {
					t.Errorf("message %d: flush asked for = %v, want %v", i, first, i == 0)
				}
				want = append(want, m...)
			}
			c.FlushToClient(0)
			var sizes []int
			var got []byte
			for _, b := range w.writes {
				sizes = append(sizes, len(b))
				got = append(got, b...)
			}
			if len(sizes) != len(tc.writes) || (len(sizes) > 0 && !bytes.Equal(got, want)) {
				t.Errorf("writes of %v bytes, want %v, in order", sizes, tc.writes)
			}
			for i := range min(len(sizes), len(tc.writes)) {
				if sizes[i] != tc.writes[i] {
					t.Errorf("write %d: %d bytes, want %d", i, sizes[i], tc.writes[i])
				}
			}
			if tx, drops := c.Stats.Tx.Load(), c.Stats.Drops[turn.DropUnexpected].Load(); tx != tc.tx || drops != tc.drops {
				t.Errorf("counted %d sent and %d dropped, want %d and %d", tx, drops, tc.tx, tc.drops)
			}
			// Emptied: the next message asks for a flush again.
			if !c.QueueToClient(0, msgs[0]) {
				t.Error("after a flush, the first message did not ask for one")
			}
		})
	}
	t.Run("outbox", func(t *testing.T) {
		c := testConn(t)
		o := &countingOutbox{}
		c.Out = o
		if !c.QueueToClient(1, msgs[0]) || c.QueueToClient(1, msgs[1]) {
			t.Error("the outbox's answers were not passed on")
		}
		c.FlushToClient(1)
		if o.queued != 2 || o.flushed != 1 || len(c.q) != 0 {
			t.Errorf("outbox queued %d and flushed %d times, connection queue %d bytes; want 2, 1, 0", o.queued, o.flushed, len(c.q))
		}
	})
}
