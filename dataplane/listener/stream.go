package listener

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// streamListener is a TURN-TCP or TURN-TLS listener (RFC 8656 §3.1 over a
// byte stream: STUN messages and ChannelData framed by their length fields).
type streamListener struct {
	connListener
	ln    net.Listener
	certs *certHolder // TURN-TLS only
	tls   *tls.Config // TURN-TLS only
}

func (l *streamListener) LocalAddr() string { return l.ln.Addr().String() }

// loadKeyPair reads a listener's PEM certificate and key, with errors that
// name the listener and the file.
func loadKeyPair(lc config.Listener) (tls.Certificate, []byte, []byte, error) {
	cert, err := os.ReadFile(lc.Cert)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: cert: %w", lc.Name, err)
	}
	key, err := os.ReadFile(lc.Key)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: key: %w", lc.Name, err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: certificate and key %s, %s: %w", lc.Name, lc.Cert, lc.Key, err)
	}
	return pair, cert, key, nil
}

func startStream(env Env, lc config.Listener, al *allowlist.List) (*streamListener, error) {
	l := &streamListener{}
	l.init(env, lc, turn.ProtoTCP, al)
	var tlsConf *tls.Config
	if lc.Protocol == config.ProtoTURNTLS {
		certs, err := newCertHolder(lc, env.Log)
		if err != nil {
			return nil, err
		}
		l.certs = certs
		l.proto = turn.ProtoTLS
		l.cert, l.key = certs.PEM()
		tlsConf = &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(lc.Address, fmt.Sprint(lc.Port)))
	if err != nil {
		if l.certs != nil {
			l.certs.Close()
		}
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	// TLS runs over the connection's outConn (see accept), not over a
	// tls.NewListener's plain connection.
	l.tls = tlsConf
	l.ln = ln
	go l.accept()
	return l, nil
}

func (l *streamListener) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: back off
			continue
		}
		cc := newClientConn(&l.connListener, c)
		o, err := newOutConn(c.(*net.TCPConn), cc.quit)
		if err != nil {
			abort(c)
			continue
		}
		cc.o, cc.c, cc.w = o, o, o
		if l.tls != nil {
			cc.c = tls.Server(o, l.tls)
			cc.w, cc.tls = cc.c, true
		}
		switch l.admit(cc, true) {
		case refused:
			abort(cc.c)
			continue
		case closing:
			cc.c.Close()
			return
		}
		_ = o.SetNoDelay(true)
		go l.serveConn(cc)
	}
}

// serveConn reads framed messages until the client goes away, stays idle
// past its limit or breaks the framing.
func (l *streamListener) serveConn(c *clientConn) {
	defer c.finish()
	if tc, ok := c.c.(*tls.Conn); ok {
		_ = c.c.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			l.env.Log.Debug("tls handshake failed", "client", c.ft.String(), "error", err)
			return
		}
		_ = c.c.SetWriteDeadline(time.Time{})
	}
	f := frameReader{conn: c.c}
	defer f.release()
	var res turn.Result
	last, limit := time.Now(), handshakeTimeout // the first message must come soon
	for {
		msg, err := f.next(last.Add(limit))
		if err != nil {
			if isTimeout(err) && (time.Since(last) < limit || !c.expired(last)) {
				limit = c.idleLimit()
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
				l.env.Log.Debug("closing connection", "client", c.ft.String(), "error", err)
			}
			if errors.Is(err, errBadFrame) {
				c.stats.Drops[turn.DropMalformed].Add(1)
			}
			return
		}
		last = time.Now()
		if !c.handle(msg, &res) {
			return
		}
		limit = c.idleLimit()
	}
}

var errBadFrame = errors.New("not a STUN or ChannelData frame")

// frameSize reads a frame's header, its first 4 bytes: a STUN message
// (20-byte header + length) or ChannelData (4-byte header + length, padded
// to 4 bytes on streams, RFC 8656 §12.5). It returns the bytes the frame
// takes on the stream and the bytes of it to hand on (padding excluded),
// or errBadFrame.
func frameSize(hdr []byte) (total, keep int, err error) {
	length := int(binary.BigEndian.Uint16(hdr[2:4]))
	switch hdr[0] >> 6 {
	case 0:
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
	// dl is the connection's read deadline (see readDeadline).
	dl readDeadline
}

// deadlineSlack is how early a read deadline may fire: a connection's
// deadline is moved forward only when it would fire earlier than wanted by
// more than this (see readDeadline).
const deadlineSlack = 250 * time.Millisecond

// readDeadline keeps a connection's read deadline within deadlineSlack
// before the one wanted. Setting a deadline resets a runtime timer; on a
// busy connection the wanted deadline moves a little with every message,
// so setting it each time would cost a timer update per message. The
// caller must treat a timeout that comes before its own deadline as no
// timeout, and call expired after every timeout.
type readDeadline struct{ set time.Time }

func (d *readDeadline) apply(c net.Conn, want time.Time) {
	if want.Before(d.set) || want.Sub(d.set) > deadlineSlack {
		_ = c.SetReadDeadline(want)
		d.set = want
	}
}

// expired forgets the deadline after it has passed, so that the next
// apply sets it again.
func (d *readDeadline) expired() { d.set = time.Time{} }

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
		f.dl.apply(f.conn, deadline)
		n, err := f.conn.Read(f.idle[:])
		if n == 0 {
			if isTimeout(err) {
				f.dl.expired()
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
	f.dl.apply(f.conn, wait)
	n, err := f.conn.Read((*f.buf)[f.w:])
	f.w += n
	if n > 0 {
		return nil
	}
	if isTimeout(err) {
		f.dl.expired()
	}
	if between && wait.Before(deadline) && isTimeout(err) {
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

// Close stops accepting, closes every connection and deletes their
// allocations.
func (l *streamListener) Close() {
	l.closed.Store(true)
	l.ln.Close()
	if l.certs != nil {
		l.certs.Close()
	}
	l.closeConns()
}
