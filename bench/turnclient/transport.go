package turnclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/pion/dtls/v3"
)

// Transport carries whole TURN messages (STUN messages and ChannelData)
// between a client and its server: datagrams over UDP and DTLS, framed on
// the stream over TCP and TLS (RFC 8656 §12.5).
type Transport interface {
	// WriteMsg sends one message. On a stream, ChannelData must already
	// be padded to a multiple of 4 bytes (PadChannelData).
	WriteMsg(b []byte) error
	// ReadMsg reads one message into b and returns its length, padding
	// excluded. A message longer than b is an error on a stream (the
	// framing would be lost) and truncated on datagrams.
	ReadMsg(b []byte) (int, error)
	SetReadDeadline(t time.Time) error
	// Stream is true over TCP and TLS: no retransmissions, padded ChannelData.
	Stream() bool
	Close() error
	// LocalAddr is the client's transport address.
	LocalAddr() netip.AddrPort
}

// Proto names a client transport.
type Proto string

// The client transports of RFC 8656 §3.1 and RFC 7350.
const (
	UDP  Proto = "udp"
	TCP  Proto = "tcp"
	TLS  Proto = "tls"
	DTLS Proto = "dtls"
)

// ParseProto parses udp, tcp, tls or dtls.
func ParseProto(s string) (Proto, error) {
	switch p := Proto(s); p {
	case UDP, TCP, TLS, DTLS:
		return p, nil
	}
	return "", fmt.Errorf("transport %q: want udp, tcp, tls or dtls", s)
}

// Dial opens a client transport of kind p from local (port 0 picks one)
// to server. TLS and DTLS skip certificate verification: the bench servers
// use self-signed loopback certificates, and what is measured is the
// record layer, not the PKI. Over UDP the socket is connected to server.
func Dial(p Proto, local, server netip.AddrPort, timeout time.Duration) (Transport, error) {
	laddr := net.UDPAddrFromAddrPort(local)
	switch p {
	case UDP:
		uc, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(server))
		if err != nil {
			return nil, err
		}
		return &udpTransport{c: uc}, nil
	case DTLS:
		uc, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(server))
		if err != nil {
			return nil, err
		}
		dc, err := dtls.Client(dtlsPacketConn{uc}, uc.RemoteAddr(), &dtls.Config{InsecureSkipVerify: true})
		if err != nil {
			uc.Close()
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := dc.HandshakeContext(ctx); err != nil {
			dc.Close()
			return nil, fmt.Errorf("dtls handshake: %w", err)
		}
		return &dtlsTransport{c: dc, local: uc.LocalAddr().(*net.UDPAddr).AddrPort()}, nil
	case TCP, TLS:
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: laddr.IP, Port: laddr.Port}, Timeout: timeout}
		c, err := d.Dial("tcp", server.String())
		if err != nil {
			return nil, err
		}
		_ = c.(*net.TCPConn).SetNoDelay(true)
		local := c.LocalAddr().(*net.TCPAddr).AddrPort()
		if p == TLS {
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
			_ = tc.SetDeadline(time.Now().Add(timeout))
			if err := tc.Handshake(); err != nil {
				c.Close()
				return nil, fmt.Errorf("tls handshake: %w", err)
			}
			_ = tc.SetDeadline(time.Time{})
			c = tc
		}
		return &streamTransport{c: c, r: NewFrameReader(c), local: local}, nil
	}
	return nil, fmt.Errorf("transport %q: want udp, tcp, tls or dtls", p)
}

// dtlsPacketConn adapts a connected UDP socket to the net.PacketConn pion/dtls wants.
type dtlsPacketConn struct{ *net.UDPConn }

func (c dtlsPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.UDPConn.Write(b) }

type udpTransport struct{ c *net.UDPConn }

func (t *udpTransport) WriteMsg(b []byte) error { _, err := t.c.Write(b); return err }
func (t *udpTransport) ReadMsg(b []byte) (int, error) {
	return t.c.Read(b)
}
func (t *udpTransport) SetReadDeadline(d time.Time) error { return t.c.SetReadDeadline(d) }
func (t *udpTransport) Stream() bool                      { return false }
func (t *udpTransport) Close() error                      { return t.c.Close() }
func (t *udpTransport) LocalAddr() netip.AddrPort {
	return t.c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// UDPConn is the socket of a UDP transport, nil for the others.
func UDPConn(t Transport) *net.UDPConn {
	if u, ok := t.(*udpTransport); ok {
		return u.c
	}
	return nil
}

type dtlsTransport struct {
	c     *dtls.Conn
	local netip.AddrPort
}

func (t *dtlsTransport) WriteMsg(b []byte) error           { _, err := t.c.Write(b); return err }
func (t *dtlsTransport) ReadMsg(b []byte) (int, error)     { return t.c.Read(b) }
func (t *dtlsTransport) SetReadDeadline(d time.Time) error { return t.c.SetReadDeadline(d) }
func (t *dtlsTransport) Stream() bool                      { return false }
func (t *dtlsTransport) Close() error                      { return t.c.Close() }
func (t *dtlsTransport) LocalAddr() netip.AddrPort         { return t.local }

type streamTransport struct {
	c     net.Conn
	r     *FrameReader
	local netip.AddrPort
}

func (t *streamTransport) WriteMsg(b []byte) error           { _, err := t.c.Write(b); return err }
func (t *streamTransport) ReadMsg(b []byte) (int, error)     { return t.r.Read(b) }
func (t *streamTransport) SetReadDeadline(d time.Time) error { return t.c.SetReadDeadline(d) }
func (t *streamTransport) Stream() bool                      { return true }
func (t *streamTransport) Close() error                      { return t.c.Close() }
func (t *streamTransport) LocalAddr() netip.AddrPort         { return t.local }

// FrameReader splits a TURN-TCP/TLS byte stream into messages (RFC 8656
// §12.5): a STUN message is 20 header bytes plus the length in bytes 2-3 (a
// multiple of 4); ChannelData is 4 header bytes plus the length in bytes
// 2-3, padded to a multiple of 4 on the stream.
type FrameReader struct {
	r *bufio.Reader
}

// NewFrameReader reads frames from r through a 64 KiB buffer.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// ErrFrame means the stream holds something that is neither a STUN message
// nor ChannelData; the framing is lost and the connection is of no more use.
var ErrFrame = errors.New("turnclient: not a STUN or ChannelData frame")

// Read reads the next message into b and returns its length without
// padding. It fails with ErrFrame on a malformed header and with
// io.ErrShortBuffer when the message does not fit in b (the frame is
// consumed, so the stream stays in step).
func (f *FrameReader) Read(b []byte) (int, error) {
	h, err := f.r.Peek(4)
	if err != nil {
		return 0, err
	}
	n, total, ok := FrameLen(h)
	if !ok {
		return 0, ErrFrame
	}
	if total > len(b) {
		if _, err := f.r.Discard(total); err != nil {
			return 0, err
		}
		return 0, io.ErrShortBuffer
	}
	if _, err := io.ReadFull(f.r, b[:total]); err != nil {
		return 0, err
	}
	return n, nil
}

// FrameLen reads a stream frame's first 4 bytes and returns the message
// length (n) and the bytes it takes on the stream including padding
// (total); ok is false when the first two bits are neither 00 (STUN, whose
// length must be a multiple of 4) nor 01 (ChannelData).
func FrameLen(h []byte) (n, total int, ok bool) {
	if len(h) < 4 {
		return 0, 0, false
	}
	l := int(h[2])<<8 | int(h[3])
	switch h[0] >> 6 {
	case 0:
		if l%4 != 0 {
			return 0, 0, false
		}
		return 20 + l, 20 + l, true
	case 1:
		return 4 + l, 4 + (l+3)&^3, true
	}
	return 0, 0, false
}

// PadChannelData returns frame (a ChannelData message) padded with zeros
// to a multiple of 4 bytes, as streams require (RFC 8656 §12.5).
func PadChannelData(frame []byte) []byte {
	if pad := (4 - len(frame)%4) % 4; pad > 0 {
		frame = append(frame, make([]byte, pad)...)
	}
	return frame
}
