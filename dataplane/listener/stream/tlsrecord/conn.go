package tlsrecord

import (
	"io"
	"net"
)

// handshakeRecordMax is the largest record a handshake may carry, in
// bytes: a TLS 1.2 ciphertext body (2^14 + 2048, RFC 5246 §6.2.3) and its
// header. A TLS 1.3 record is shorter.
const handshakeRecordMax = Header + MaxPlaintext + 2048

// RecordConn is the net.Conn to run crypto/tls's server handshake over
// when the connection's records are to be taken over after it (New): its
// Read never takes from the socket past the end of a record, so when the
// handshake returns, everything the client sent after its Finished is
// still in the socket, and crypto/tls has consumed exactly the records it
// handled. Each record costs two reads of the socket (its header, its
// body), which only the handshake pays: after Finish, Read passes
// straight through (for a session that stays with crypto/tls, a TLS 1.2
// one, over a socket whose reads may stop short). Write and the rest are
// the wrapped Conn's. Read and Finish run on one goroutine, the
// handshake's.
type RecordConn struct {
	net.Conn
	buf     []byte // one record, read whole
	pending []byte // what of buf Read has not returned yet
	done    bool   // Finish was called
}

// NewRecordConn wraps c.
func NewRecordConn(c net.Conn) *RecordConn { return &RecordConn{Conn: c} }

// Read returns bytes of the current record, reading the next one whole
// from the socket when the current one is used up. Errors: the socket's,
// io.ErrUnexpectedEOF for a connection closed inside a record, and
// ErrMalformed for a header announcing more than handshakeRecordMax.
func (c *RecordConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 && c.done {
		return c.Conn.Read(p)
	}
	if len(c.pending) == 0 {
		if c.buf == nil {
			c.buf = make([]byte, handshakeRecordMax)
		}
		if _, err := io.ReadFull(c.Conn, c.buf[:Header]); err != nil {
			return 0, err
		}
		n := Header + (int(c.buf[3])<<8 | int(c.buf[4]))
		if n > len(c.buf) {
			return 0, ErrMalformed
		}
		if _, err := io.ReadFull(c.Conn, c.buf[Header:n]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		c.pending = c.buf[:n]
	}
	k := copy(p, c.pending)
	c.pending = c.pending[k:]
	return k, nil
}

// Finish ends record-at-a-time reading (call it when the handshake has
// returned) and reports whether every byte read from the socket had been
// returned by Read, that is, whether crypto/tls holds nothing unread
// past its last record.
func (c *RecordConn) Finish() (drained bool) {
	c.done = true
	drained = len(c.pending) == 0
	if drained {
		c.buf = nil
	}
	return drained
}
