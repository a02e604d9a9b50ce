package stream

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tlsSocket is the connection under a TURN-TLS session (crypto/tls's
// net.Conn). Until the handshake is done it passes everything to the
// handshake's connection (an outConn, or the helloConn that replays a
// ClientHello read first) on the connection's goroutine. Then, on Linux
// with the event loops on, the socket moves to a loop (toLoop): its
// descriptor is duplicated out of the Go netpoller into an fdConn, and
// from then on Read is one non-blocking read(2) that the loop drives
// through the session (tlsSession), and Write is the fdConn's
// non-blocking write.
//
// A Read that would block returns errWouldBlock, a temporary net.Error:
// crypto/tls keeps whatever part of a record it holds and gives the error
// back without poisoning the session (a temporary error is the one error
// its record reader does not keep; ternd's own, tlsrecord.Session, keeps
// none), so the loop reads the session again on the next wake-up and it
// carries on where it stopped. The record count below serves sessions
// that stay with crypto/tls (TLS 1.2).
//
// mu guards the move against Close and Abort from other goroutines; it is
// a leaf: nothing is called under it but close(2) of the duplicate.
type tlsSocket struct {
	net.Conn          // the handshake's connection: o, or a helloConn over it
	o        *outConn // the socket while the handshake runs

	mu     sync.Mutex
	closed bool                   // Close or Abort was called
	fc     atomic.Pointer[fdConn] // set once the socket moved to a loop

	// The loop's read state, touched only by the loop once moved: whether
	// a read this wake-up found the socket empty (a short read took all
	// it held), and how many reads this wake-up made (loopReads at most).
	drained bool
	reads   int
	// records counts the whole TLS records read from the socket since the
	// move (rec is the parse of the one under way); taken counts the
	// tls.Conn.Reads that returned the whole plaintext of at least one
	// record. Each such Read takes one record or more (an alert or a
	// post-handshake message goes with the record after it), so taken >=
	// records proves that crypto/tls holds no whole record: the loop then
	// makes no Read that could only end in errWouldBlock, which would cost
	// crypto/tls's record reader an allocation and a system call's worth
	// of work for nothing. Records crypto/tls held from before the move
	// are not counted: until a Read has ended in errWouldBlock once after
	// the move (settled), the loop reads until it does; and each such end
	// sets taken to records, since crypto/tls then holds no whole record.
	records, taken uint64
	rec            recordScan
	settled        bool
}

// recordScan follows TLS record boundaries (RFC 8446 §5.1: a 5-byte header
// whose last two bytes are the length) across the reads of a stream. It
// assumes the first byte it sees begins a record, which fails when
// crypto/tls held part of a record at the move; a header that is not one
// (RFC 8446 §5.1 and RFC 5246 §6.2.1: content type 20-24, record version
// 3.3, at most 2^14 + 2048 bytes) then marks the scan lost, and a lost scan
// counts nothing more, so the loop reads its connection until errWouldBlock
// every time.
type recordScan struct {
	hdr    [5]byte
	nhdr   int // header bytes seen of the record under way
	remain int // body bytes still to come, once its header is whole
	lost   bool
}

// maxRecord is the largest record body TLS 1.2 allows (2^14 + 2048).
const maxRecord = 1<<14 + 2048

// scan passes b and returns how many records it completed.
func (r *recordScan) scan(b []byte) uint64 {
	var done uint64
	for len(b) > 0 && !r.lost {
		if r.nhdr < len(r.hdr) {
			k := copy(r.hdr[r.nhdr:], b)
			r.nhdr += k
			b = b[k:]
			if r.nhdr < len(r.hdr) {
				break
			}
			r.remain = int(r.hdr[3])<<8 | int(r.hdr[4])
			if r.hdr[0] < 20 || r.hdr[0] > 24 || r.hdr[1] != 3 || r.hdr[2] != 3 || r.remain > maxRecord {
				r.lost = true
				return done
			}
		}
		k := min(r.remain, len(b))
		r.remain -= k
		b = b[k:]
		if r.remain == 0 {
			done++
			r.nhdr = 0
		}
	}
	return done
}

// errWouldBlock is Read's error when the socket has nothing more to read
// this wake-up. It is a temporary timeout to crypto/tls (see tlsSocket).
var errWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "stream: no more to read this wake-up" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// Read implements net.Conn for crypto/tls: before the move it reads the
// handshake's connection, after it one non-blocking read(2) (readMoved).
func (s *tlsSocket) Read(b []byte) (int, error) {
	if fc := s.fc.Load(); fc != nil {
		return s.readMoved(fc, b)
	}
	return s.Conn.Read(b)
}

// Write implements net.Conn for crypto/tls (one sealed record per call):
// it never blocks once moved, as outConn never blocks before.
func (s *tlsSocket) Write(b []byte) (int, error) {
	if fc := s.fc.Load(); fc != nil {
		return fc.Write(b)
	}
	return s.Conn.Write(b)
}

// Close closes the socket (crypto/tls calls it after its close_notify;
// core.Conn.closeRaw calls it without one). Once moved, the loop closes
// the descriptor (fdConn.Close).
func (s *tlsSocket) Close() error {
	s.mu.Lock()
	s.closed = true
	fc := s.fc.Load()
	s.mu.Unlock()
	if fc != nil {
		return fc.Close()
	}
	return s.o.Close()
}

// Abort closes the socket with a reset (core.Conn.Abort).
func (s *tlsSocket) Abort() {
	s.mu.Lock()
	s.closed = true
	fc := s.fc.Load()
	s.mu.Unlock()
	if fc != nil {
		fc.Abort()
		return
	}
	_ = s.o.SetLinger(0)
	s.o.Close()
}

// The deadlines apply to the handshake's connection; once moved the loop
// enforces the connection's time limits (fdConn's do nothing).
func (s *tlsSocket) SetDeadline(t time.Time) error {
	if fc := s.fc.Load(); fc != nil {
		return nil
	}
	return s.Conn.SetDeadline(t)
}

func (s *tlsSocket) SetReadDeadline(t time.Time) error {
	if fc := s.fc.Load(); fc != nil {
		return nil
	}
	return s.Conn.SetReadDeadline(t)
}

func (s *tlsSocket) SetWriteDeadline(t time.Time) error {
	if fc := s.fc.Load(); fc != nil {
		return nil
	}
	return s.Conn.SetWriteDeadline(t)
}

// backlogged reports whether a message of n bytes would wait behind more
// than outBacklog bytes, for tlsRelay.
func (s *tlsSocket) backlogged(n int) bool {
	if fc := s.fc.Load(); fc != nil {
		return fc.backlogged(n)
	}
	return s.o.backlogged(n)
}
