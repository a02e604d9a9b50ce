package stream

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/dataplane/listener/core"
)

// maxStreamMessage is the largest TURN message accepted on a stream: a
// STUN header plus the largest length field.
const maxStreamMessage = 20 + 0xFFFF

var errBadFrame = errors.New("not a STUN or ChannelData frame")

// errFrameBudget is returned by frameReader.next when a frame's buffer
// would grow past grownBudget.
var errFrameBudget = errors.New("frame buffers over budget")

// errStalledFrame is returned by frameReader.next when a frame that has
// begun does not complete within the partial-frame limit.
var errStalledFrame = errors.New("frame not completed in time")

// frameSize reads a frame's header, its first 4 bytes: a STUN message
// (20-byte header + length) or ChannelData (4-byte header + length, padded
// to 4 bytes on streams, RFC 8656 §12.5). It returns the bytes the frame
// takes on the stream and the bytes of it to hand on (padding excluded),
// or errBadFrame (neither kind, or a STUN length that is not a multiple
// of 4).
func frameSize(hdr []byte) (total, keep int, err error) {
	length := int(binary.BigEndian.Uint16(hdr[2:4]))
	switch hdr[0] >> 6 {
	case 0:
		// Every STUN attribute is padded to 4 bytes, so a length that is
		// not a multiple of 4 is no STUN message (RFC 8489 §5): waiting for
		// its body would hold the connection and its buffer for nothing.
		if length&3 != 0 {
			return 0, 0, errBadFrame
		}
		return 20 + length, 20 + length, nil
	case 1:
		return (4 + length + 3) &^ 3, 4 + length, nil
	}
	return 0, 0, errBadFrame
}

// Read buffers of stream connections. A connection takes a small buffer
// from a pool when bytes arrive and gives it back once it has been silent
// for bufferHold, so a silent connection holds none. A frame larger than
// the small buffer does not get a buffer of its declared length: the
// buffer doubles, through pooled size classes, each time the bytes that
// have arrived fill it, so that a connection holds about twice what it
// has sent (issue 22, item 3: a header declaring 65,000 bytes used to take
// 64 KiB at once). A grown buffer goes back to its pool as soon as its
// frame has been handled.
const (
	// smallReadBuffer holds a few media packets (ChannelData of up to
	// ~1,500 bytes), so that a busy connection reads several per system
	// call.
	smallReadBuffer = 4 << 10
	// bufferHold is how long a connection keeps its buffer between
	// messages: far above the gaps of a media stream (20-100 ms), so that
	// a busy connection never gives it back.
	bufferHold = time.Second
)

// bufClasses are the read buffer sizes, each twice the one before; the
// last holds the largest frame.
var bufClasses = [...]int{smallReadBuffer, 8 << 10, 16 << 10, 32 << 10, maxStreamMessage}

// bufPools holds the free buffers of each class.
var bufPools [len(bufClasses)]sync.Pool

// grownBudget caps the bytes of the buffers above the small class that
// all stream connections of the process hold at once: 1,024 frames of
// 64 KiB in flight, far more than clients send (a WebRTC client's
// messages and ChannelData stay under 1,500 bytes), and a bound on what
// connections that send most of a large frame and stop can hold, however
// many they are (issue 22, item 3). A frame that would take a buffer past
// it closes its connection. A variable for tests.
var grownBudget int64 = 64 << 20

// grown is the bytes of buffers above the small class held by readers.
var grown atomic.Int64

func init() {
	for i, size := range bufClasses {
		bufPools[i].New = func() any { b := make([]byte, size); return &b }
	}
}

// frameReader splits a TURN byte stream into frames, holding a read buffer
// only while the connection is busy, no larger than what has arrived
// calls for.
type frameReader struct {
	conn  net.Conn
	buf   *[]byte // from bufPools[class]; nil while silent
	class int
	r, w  int // the unread bytes are (*buf)[r:w]
	// idle receives the first bytes after a silence, before a buffer is
	// taken: enough for a frame header.
	idle [4]byte
	// dl is the connection's read deadline (see core.ReadDeadline).
	dl core.ReadDeadline
	// partialLimit is how long the reader waits for the rest of a frame
	// it has begun to receive; 0 waits as long as next's deadline.
	partialLimit time.Duration
	// partial is when the reader began waiting for the rest of a frame;
	// zero when no frame has begun since the last one was returned.
	partial time.Time
}

// next returns the next frame, padding excluded, with no capacity beyond
// it; it stays valid until the following call. Past deadline it returns a
// timeout error, after which the reader may be used again. It returns
// io.EOF at the end of the stream between frames, io.ErrUnexpectedEOF
// within one, errBadFrame for bytes that are neither STUN nor ChannelData,
// errStalledFrame when a frame begun has not completed within
// partialLimit, errFrameBudget when its buffer would pass grownBudget, or
// the connection's error.
func (f *frameReader) next(deadline time.Time) ([]byte, error) {
	for {
		if f.buf != nil {
			if f.r == f.w {
				f.r, f.w = 0, 0
				if f.class > 0 { // a large frame was handled
					f.release()
				}
			} else if f.w-f.r >= 4 {
				total, keep, err := frameSize((*f.buf)[f.r : f.r+4])
				if err != nil {
					return nil, err
				}
				if f.w-f.r >= total {
					// Capped at the frame: the engine may append to a
					// message (checking MESSAGE-INTEGRITY does), which
					// must not overwrite the frames buffered after it.
					b := (*f.buf)[f.r : f.r+keep : f.r+keep]
					f.r += total
					f.partial = time.Time{}
					return b, nil
				}
				if err := f.makeRoom(total); err != nil {
					return nil, err
				}
			} else if err := f.makeRoom(4); err != nil { // a header cut short
				return nil, err
			}
		}
		if err := f.fill(deadline); err != nil {
			if errors.Is(err, io.EOF) && f.buf != nil && f.r != f.w {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// take returns the next whole frame among the bytes already read into the
// buffer, as next does, for an event loop that reads into (*f.buf)[f.w:]
// itself. With no whole frame it returns nil and makes room for the rest
// (makeRoom's errors), noting when the frame begun started (now, for
// partial); a handled large frame's buffer goes back to its pool, and an
// empty buffer stays for the caller to release. errBadFrame for bytes
// that are neither STUN nor ChannelData.
func (f *frameReader) take(now func() time.Time) ([]byte, error) {
	if f.r == f.w {
		f.r, f.w = 0, 0
		if f.class > 0 { // a large frame was handled
			f.release()
		}
		f.partial = time.Time{}
		return nil, nil
	}
	need := 4 // a header cut short
	if f.w-f.r >= 4 {
		total, keep, err := frameSize((*f.buf)[f.r : f.r+4])
		if err != nil {
			return nil, err
		}
		if f.w-f.r >= total {
			// Capped at the frame, as in next.
			b := (*f.buf)[f.r : f.r+keep : f.r+keep]
			f.r += total
			f.partial = time.Time{}
			return b, nil
		}
		need = total
	}
	if f.partial.IsZero() {
		f.partial = now()
	}
	return nil, f.makeRoom(need)
}

// makeRoom makes room to read more of a frame of total bytes from f.r on:
// it moves the unread bytes to the front when the frame would not fit
// behind them, and when the buffer is full of the frame's bytes it moves
// them into a buffer of the next class. It never takes a buffer larger
// than twice the bytes at hand, and returns errFrameBudget rather than
// take one past grownBudget.
func (f *frameReader) makeRoom(total int) error {
	if f.r+total <= len(*f.buf) {
		return nil
	}
	if f.r > 0 {
		f.w = copy(*f.buf, (*f.buf)[f.r:f.w])
		f.r = 0
	}
	if f.w < len(*f.buf) {
		return nil // room to read into
	}
	more := int64(bufClasses[f.class+1])
	if f.class > 0 {
		more -= int64(bufClasses[f.class])
	}
	if grown.Add(more) > grownBudget {
		grown.Add(-more)
		return errFrameBudget
	}
	bp := bufPools[f.class+1].Get().(*[]byte)
	copy(*bp, (*f.buf)[:f.w])
	bufPools[f.class].Put(f.buf)
	f.buf = bp
	f.class++
	return nil
}

// fill reads more bytes, waiting at most until deadline, and for the rest
// of a frame begun at most partialLimit. A silent connection waits with no
// buffer; a buffer kept between frames goes back to its pool after
// bufferHold of silence.
func (f *frameReader) fill(deadline time.Time) error {
	if f.buf == nil {
		f.dl.Apply(f.conn, deadline)
		n, err := f.conn.Read(f.idle[:])
		if n == 0 {
			if core.IsTimeout(err) {
				f.dl.Expired()
			}
			return err
		}
		f.buf = bufPools[0].Get().(*[]byte)
		f.class = 0
		f.r, f.w = 0, copy(*f.buf, f.idle[:n])
		return nil
	}
	wait := deadline
	between := f.r == f.w
	var stall time.Time // when the frame begun is overdue
	if between {
		if hold := time.Now().Add(bufferHold); hold.Before(wait) {
			wait = hold
		}
	} else if f.partialLimit > 0 {
		if f.partial.IsZero() {
			f.partial = time.Now()
		}
		stall = f.partial.Add(f.partialLimit)
		if stall.Before(wait) || wait.IsZero() {
			wait = stall
		}
	}
	f.dl.Apply(f.conn, wait)
	n, err := f.conn.Read((*f.buf)[f.w:])
	f.w += n
	if n > 0 {
		return nil
	}
	if !core.IsTimeout(err) {
		return err
	}
	f.dl.Expired()
	switch {
	case between && wait.Before(deadline):
		f.release() // silent for bufferHold: wait on without the buffer
		return nil
	case !stall.IsZero() && !time.Now().Before(stall):
		return errStalledFrame
	case !stall.IsZero() && wait.Equal(stall):
		return nil // woken early (core.DeadlineSlack): wait for the rest
	}
	return err
}

// release gives the buffer back to its pool.
func (f *frameReader) release() {
	if f.buf == nil {
		return
	}
	if f.class > 0 {
		grown.Add(-int64(bufClasses[f.class]))
	}
	bufPools[f.class].Put(f.buf)
	f.buf, f.class, f.r, f.w = nil, 0, 0, 0
}
