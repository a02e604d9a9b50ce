package listener

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
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
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		cc := newClientConn(&l.connListener, c)
		if !l.add(cc) {
			c.Close()
			return
		}
		go cc.writer()
		go l.serveConn(cc)
	}
}

// serveConn reads framed messages until the client goes away, stays idle
// past the timeout or breaks the framing.
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
	r := bufio.NewReaderSize(c.c, 16<<10)
	buf := make([]byte, maxStreamMessage)
	var res turn.Result
	timeout := handshakeTimeout
	for {
		_ = c.c.SetReadDeadline(time.Now().Add(timeout))
		n, err := readFrame(r, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				l.env.Log.Debug("closing connection", "client", c.ft.String(), "error", err)
			}
			if errors.Is(err, errBadFrame) {
				l.stats.Drops[turn.DropMalformed].Add(1)
			}
			return
		}
		timeout = l.env.IdleTimeout
		c.handle(buf[:n], &res)
	}
}

var errBadFrame = errors.New("not a STUN or ChannelData frame")

// readFrame reads one message from a TURN stream into buf and returns its
// length, padding excluded: a STUN message (20-byte header + length) or
// ChannelData (4-byte header + length, padded to 4 bytes on streams, RFC
// 8656 §12.5).
func readFrame(r *bufio.Reader, buf []byte) (int, error) {
	hdr, err := r.Peek(4)
	if err != nil {
		return 0, err
	}
	length := int(binary.BigEndian.Uint16(hdr[2:4]))
	var total, keep int
	switch hdr[0] >> 6 {
	case 0:
		total = 20 + length
		keep = total
	case 1:
		keep = 4 + length
		total = (keep + 3) &^ 3
	default:
		return 0, errBadFrame
	}
	if total > len(buf) {
		return 0, errBadFrame
	}
	if _, err := io.ReadFull(r, buf[:total]); err != nil {
		return 0, err
	}
	return keep, nil
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
