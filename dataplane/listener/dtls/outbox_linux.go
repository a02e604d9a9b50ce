package dtls

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/udpio"
)

// outboxBytes is the room for sealed records in one relay worker's outbox:
// a batch of udpio.BatchSize records of media size, or a few large ones;
// a record that does not fit sends what waits first.
const outboxBytes = 64 << 10

// outbox holds the records one relay worker has sealed for the listener's
// associations during one wake-up, sent together with one sendmmsg (more
// only when the kernel refuses one) on the listener socket when the
// worker's wake-up is over (core.Outbox). Only its worker uses it.
type outbox struct {
	rc     syscall.RawConn // the listener socket, kept open across a send by Control
	b      *udpio.Batch
	buf    []byte // the sealed records the batch points into
	listed bool   // the worker owes a Flush
	sendFn func(fd uintptr)
}

func newOutboxes(rc syscall.RawConn, workers int) []*outbox {
	obs := make([]*outbox, max(workers, 1))
	for i := range obs {
		o := &outbox{rc: rc}
		o.sendFn = o.send
		obs[i] = o
	}
	return obs
}

// queue seals msg into one record of rec for remote and queues it, to be
// sent from local (the zero Addr: the socket's address); it reports true
// when the worker must flush the outbox after its wake-up.
func (o *outbox) queue(rec *record.Records, remote netip.AddrPort, local netip.Addr, msg []byte) (bool, error) {
	if o.b == nil {
		o.b = udpio.NewSendBatch(udpio.BatchSize, false)
		o.buf = make([]byte, 0, outboxBytes)
	}
	need := record.SealRoom(len(msg))
	if o.b.Full() || cap(o.buf)-len(o.buf) < need {
		o.sendAll() // the worker's Flush is still owed for msg
	}
	var r []byte
	var err error
	if need > cap(o.buf) { // larger than the outbox: on its own
		r, err = rec.Seal(nil, msg)
		if err != nil {
			return false, err
		}
	} else {
		r, err = rec.Seal(o.buf[len(o.buf):], msg)
		if err != nil {
			return false, err
		}
		o.buf = o.buf[:len(o.buf)+len(r)]
	}
	o.b.AddFrom(0, r, remote, local)
	first := !o.listed
	o.listed = true
	return first, nil
}

// flush sends the queued records at the end of the worker's wake-up.
func (o *outbox) flush() {
	o.listed = false
	o.sendAll()
}

// sendAll sends the queued records; those the kernel refuses are dropped,
// as a UDP send may be.
func (o *outbox) sendAll() {
	if o.b == nil || o.b.Queued() == 0 {
		return
	}
	_ = o.rc.Control(o.sendFn) // closed: the records are dropped
	o.b.Reset()
	o.buf = o.buf[:0]
}

func (o *outbox) send(fd uintptr) {
	for off := 0; off < o.b.Queued(); {
		n, err := o.b.SendAt(int(fd), off, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
		case err != nil || n == 0:
			off++ // skip the record the kernel refused
		default:
			off += n
		}
	}
}
