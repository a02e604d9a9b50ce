package stream

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tern-gw/tern/dataplane/listener/core"
)

// maxStreamMessage is the largest TURN message accepted on a stream: a
// STUN header plus the largest length field.
const maxStreamMessage = 20 + 0xFFFF

var errBadFrame = errors.New("not a STUN or ChannelData frame")

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
// for bufferHold, so a silent connection holds none; a frame larger than
// the small buffer is read into a large one, which goes back as soon as the
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

var (
	smallBufPool = sync.Pool{New: func() any { b := make([]byte, smallReadBuffer); return &b }}
	largeBufPool = sync.Pool{New: func() any { b := make([]byte, maxStreamMessage); return &b }}
)

// frameReader splits a TURN byte stream into frames, holding a read buffer
// only while the connection is busy.
type frameReader struct {
	conn net.Conn
	buf  *[]byte // from smallBufPool or largeBufPool; nil while silent
	r, w int     // the unread bytes are (*buf)[r:w]
	// idle receives the first bytes after a silence, before a buffer is
	// taken: enough for a frame header, hence for choosing the buffer.
	idle [4]byte
	// dl is the connection's read deadline (see core.ReadDeadline).
	dl core.ReadDeadline
}

// next returns the next frame, padding excluded, with no capacity beyond
// it; it stays valid until the following call. Past deadline it returns a timeout error, after which
// the reader may be used again. It returns io.EOF at the end of the stream
// between frames, io.ErrUnexpectedEOF within one, errBadFrame for bytes that
// are neither STUN nor ChannelData, or the connection's error.
func (f *frameReader) next(deadline time.Time) ([]byte, error) {
	for {
		if f.buf != nil {
			if f.r == f.w {
				f.r, f.w = 0, 0
				if len(*f.buf) > smallReadBuffer { // a large frame was handled
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
					return b, nil
				}
				f.makeRoom(total)
			} else {
				f.makeRoom(4) // a header cut short
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

// makeRoom makes the buffer hold a frame of total bytes from f.r on: it
// moves the unread bytes to the front, or into a large buffer when the
// frame is larger than the small one.
func (f *frameReader) makeRoom(total int) {
	if total > len(*f.buf) {
		bp := largeBufPool.Get().(*[]byte)
		f.w = copy(*bp, (*f.buf)[f.r:f.w])
		f.r = 0
		smallBufPool.Put(f.buf)
		f.buf = bp
		return
	}
	if f.r+total > len(*f.buf) {
		f.w = copy(*f.buf, (*f.buf)[f.r:f.w])
		f.r = 0
	}
}

// fill reads more bytes, waiting at most until deadline. A silent
// connection waits with no buffer; a buffer kept between frames goes back
// to its pool after bufferHold of silence.
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
		f.buf = smallBufPool.Get().(*[]byte)
		f.r, f.w = 0, copy(*f.buf, f.idle[:n])
		return nil
	}
	wait := deadline
	between := f.r == f.w
	if between {
		if hold := time.Now().Add(bufferHold); hold.Before(wait) {
			wait = hold
		}
	}
	f.dl.Apply(f.conn, wait)
	n, err := f.conn.Read((*f.buf)[f.w:])
	f.w += n
	if n > 0 {
		return nil
	}
	if core.IsTimeout(err) {
		f.dl.Expired()
	}
	if between && wait.Before(deadline) && core.IsTimeout(err) {
		f.release() // silent for bufferHold: wait on without the buffer
		return nil
	}
	return err
}

// release gives the buffer back to its pool.
func (f *frameReader) release() {
	if f.buf == nil {
		return
	}
	if len(*f.buf) > smallReadBuffer {
		largeBufPool.Put(f.buf)
	} else {
		smallBufPool.Put(f.buf)
	}
	f.buf, f.r, f.w = nil, 0, 0
}
