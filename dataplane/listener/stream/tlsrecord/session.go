package tlsrecord

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Session carries application data over a connection whose records r
// seals and opens: the server's side of a TURN-TLS connection after its
// handshake, or a test's client. Read runs on one goroutine at a time;
// Write and CloseNotify take wmu, a leaf lock under which sealed records
// are written to the connection, so that they leave in sequence order
// (the connection's Write must therefore not block for long: a loop's
// socket never does). Read answers a KeyUpdate that asks for one under
// wmu too.
type Session struct {
	conn io.ReadWriter
	rec  *Records

	// The reader's state: in holds bytes read from conn (a pooled buffer,
	// held while it holds part of a record), in[r:w] not yet opened; pend
	// is what of the last opened record Read has not returned yet (it lies
	// in in).
	in   *[]byte
	r, w int
	pend []byte

	wmu    sync.Mutex
	closed bool
	out    []byte // sealed records on their way to conn, kept up to keepOut
}

// inPool holds Session read buffers: a whole record of the largest size
// fits.
var inPool = sync.Pool{New: func() any { b := make([]byte, Header+MaxCiphertext); return &b }}

// keepOut is the largest sealing buffer a Session keeps between writes,
// in bytes.
const keepOut = 32 << 10

// NewSession returns the session of r over conn.
func NewSession(conn io.ReadWriter, r *Records) *Session { return &Session{conn: conn, rec: r} }

// ErrAlert is a fatal alert from the peer, by its description (RFC 8446
// §6).
type ErrAlert byte

func (e ErrAlert) Error() string { return fmt.Sprintf("tlsrecord: alert %d from the peer", byte(e)) }

// Read returns application data: the plaintext of the next record, or
// what an earlier Read had no room for of it first. When no whole record
// is buffered it reads conn once and returns its error, if any, keeping
// what part of a record it holds for the next Read (so a temporary error,
// such as an event loop's would-block, loses nothing). A close_notify is
// io.EOF; another alert is an ErrAlert; ErrMalformed and ErrBadRecord
// end the session (§5.2, §6).
func (s *Session) Read(b []byte) (int, error) {
	for {
		if len(s.pend) > 0 {
			k := copy(b, s.pend)
			s.pend = s.pend[k:]
			s.release()
			return k, nil
		}
		if s.in != nil {
			in := *s.in
			n, err := RecordLen(in[s.r:s.w])
			if err != nil {
				return 0, err
			}
			if n > 0 && s.w-s.r >= n {
				typ, p, err := s.rec.Open(in[s.r : s.r+n])
				s.r += n
				if err != nil {
					return 0, err
				}
				switch {
				case typ == ContentAppData:
					s.pend = p
				case typ == ContentHandshake:
					if err := s.handshakeMessage(p); err != nil {
						return 0, err
					}
				case typ == ContentAlert && len(p) == 2 && p[1] == 0:
					return 0, io.EOF // close_notify
				case typ == ContentAlert && len(p) == 2:
					return 0, ErrAlert(p[1])
				default:
					return 0, ErrMalformed
				}
				s.release()
				continue
			}
			if s.r > 0 { // room for the rest of the record
				s.w = copy(in, in[s.r:s.w])
				s.r = 0
			}
		} else {
			s.in = inPool.Get().(*[]byte)
			s.r, s.w = 0, 0
		}
		m, err := s.conn.Read((*s.in)[s.w:])
		s.w += m
		if err != nil {
			s.release()
			return 0, err
		}
		if m == 0 {
			return 0, io.ErrNoProgress
		}
	}
}

// release gives the read buffer back once it holds nothing.
func (s *Session) release() {
	if s.in != nil && len(s.pend) == 0 && s.r == s.w {
		inPool.Put(s.in)
		s.in, s.r, s.w = nil, 0, 0
	}
}

// handshakeMessage handles a post-handshake message; a KeyUpdate that
// asks for one back is answered at once (§4.6.3).
func (s *Session) handshakeMessage(p []byte) error {
	respond, err := s.rec.HandleHandshake(p)
	if err != nil || !respond {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	out, err := s.rec.SealKeyUpdate(s.out[:0])
	s.keep(out)
	if err != nil {
		return err
	}
	_, err = s.conn.Write(out)
	return err
}

// Write seals b as application data, in records of at most MaxPlaintext
// bytes, and writes them to conn with one Write. It returns len(b) or
// conn's error; net.ErrClosed after CloseNotify.
func (s *Session) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	out, err := s.rec.SealData(s.out[:0], b)
	s.keep(out)
	if err != nil {
		return 0, err
	}
	if _, err := s.conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// keep holds on to the sealing buffer out for the next write, unless it
// grew past keepOut.
func (s *Session) keep(out []byte) {
	if cap(out) > keepOut {
		out = nil
	}
	s.out = out
}

// closeNotify is the alert body of a close_notify (level warning, RFC
// 8446 §6: the level is ignored in TLS 1.3).
var closeNotify = [2]byte{1, 0}

// CloseNotify writes a close_notify (§6.1) and ends writing: later
// Writes fail with net.ErrClosed. Closing conn is the caller's. A second
// call does nothing.
func (s *Session) CloseNotify() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	out, err := s.rec.Seal(s.out[:0], ContentAlert, closeNotify[:])
	s.out = nil
	if err != nil {
		return err
	}
	_, err = s.conn.Write(out)
	return err
}
