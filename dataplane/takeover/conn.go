package takeover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSocket is the hand-over socket's path when the config names none
// (admin.handoverSocket): under the run directory. ternd uses it only
// where /run/tern exists (cmd/ternd).
const DefaultSocket = "/run/tern/ternd.sock"

// The hand-over over a SOCK_SEQPACKET Unix socket, one message per step:
//
//	new -> old  hello    (protocol version: Version)
//	old -> new  fds      (up to maxFDs descriptors each: the listeners' sockets, then the relays', then the offload's maps, programs and links)
//	old -> new  snapshot (chunks of the encoded Snapshot)
//	old -> new  end      (total snapshot length, total descriptors)
//	new -> old  ready    (the new process has everything and will serve)
//	old -> new  bye      (the old process has stopped reading and released its other ports)
//	either      abort    (a reason; the old process goes on serving)
const (
	msgHello    byte = 'H'
	msgFDs      byte = 'F'
	msgSnapshot byte = 'S'
	msgEnd      byte = 'E'
	msgReady    byte = 'R'
	msgBye      byte = 'B'
	msgAbort    byte = 'A'
)

// maxFDs is the descriptors sent per message: Linux takes at most 253
// (SCM_MAX_FD) in one SCM_RIGHTS message.
const maxFDs = 250

// chunk is the most snapshot bytes per message, well under the socket's
// send buffer.
const chunk = 32 << 10

// ErrAborted is returned when the other side aborts the hand-over.
var ErrAborted = errors.New("takeover: aborted by the other process")

// Listen opens the hand-over socket at path, owner-only (mode 0600) in a
// directory it creates owner-only if missing. A socket file left by a
// process that is gone is replaced; one that a live ternd listens on is
// not (the error says so).
func Listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("hand-over socket %s: another process listens on it", path)
	}
	_ = os.Remove(path)
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	return l, nil
}

// Conn is one side of a hand-over.
type Conn struct{ c *net.UnixConn }

// NewConn wraps an accepted connection.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// Dial connects to the hand-over socket at path.
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("hand-over socket %s: %w (is a ternd with this config running?)", path, err)
	}
	return &Conn{c: c}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline bounds the steps that follow.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

func (c *Conn) send(kind byte, payload []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.c.WriteMsgUnix(append([]byte{kind}, payload...), oob, nil)
	return err
}

// recv reads one message; descriptors it carries are appended to *fds.
func (c *Conn) recv(fds *[]int) (byte, []byte, error) {
	buf := make([]byte, chunk+16)
	oob := make([]byte, unix.CmsgSpace(4*maxFDs))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, nil, err
	}
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return 0, nil, perr
		}
		for _, m := range msgs {
			got, rerr := unix.ParseUnixRights(&m)
			if rerr == nil {
				*fds = append(*fds, got...)
			}
		}
	}
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		return 0, nil, errors.New("takeover: message truncated")
	}
	if n == 0 {
		return 0, nil, errors.New("takeover: connection closed")
	}
	if buf[0] == msgAbort {
		return msgAbort, nil, fmt.Errorf("%w: %s", ErrAborted, buf[1:n])
	}
	return buf[0], buf[1:n], nil
}

func (c *Conn) expect(kind byte) ([]byte, error) {
	var fds []int
	k, p, err := c.recv(&fds)
	closeFDs(fds)
	if err != nil {
		return nil, err
	}
	if k != kind {
		return nil, fmt.Errorf("takeover: got message %q, want %q", k, kind)
	}
	return p, nil
}

// Hello is the new process's first message: the snapshot version it reads.
func (c *Conn) Hello() error {
	return c.send(msgHello, binary.BigEndian.AppendUint16(nil, Version), nil)
}

// ExpectHello reads the new process's hello and returns an error when it
// reads another snapshot version than this one writes.
func (c *Conn) ExpectHello() error {
	p, err := c.expect(msgHello)
	if err != nil {
		return err
	}
	if len(p) != 2 {
		return errors.New("takeover: malformed hello")
	}
	if v := binary.BigEndian.Uint16(p); v != Version {
		return fmt.Errorf("%w: the new process reads snapshot version %d, this one writes %d", ErrVersion, v, Version)
	}
	return nil
}

// SendState sends fds and the encoded snapshot.
func (c *Conn) SendState(snap []byte, fds []int) error {
	for i := 0; i < len(fds); i += maxFDs {
		part := fds[i:min(i+maxFDs, len(fds))]
		if err := c.send(msgFDs, binary.BigEndian.AppendUint16(nil, uint16(len(part))), part); err != nil {
			return fmt.Errorf("takeover: sending descriptors: %w", err)
		}
	}
	for i := 0; i < len(snap); i += chunk {
		if err := c.send(msgSnapshot, snap[i:min(i+chunk, len(snap))], nil); err != nil {
			return fmt.Errorf("takeover: sending the snapshot: %w", err)
		}
	}
	end := binary.BigEndian.AppendUint32(nil, uint32(len(snap)))
	end = binary.BigEndian.AppendUint32(end, uint32(len(fds)))
	return c.send(msgEnd, end, nil)
}

// RecvState receives what SendState sent: the descriptors, in order, and
// the encoded snapshot. On an error it closes the descriptors it got.
func (c *Conn) RecvState() (snap []byte, fds []int, err error) {
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	for {
		before := len(fds)
		k, p, err := c.recv(&fds)
		if err != nil {
			return nil, fds, err
		}
		switch k {
		case msgFDs:
			if len(p) != 2 || int(binary.BigEndian.Uint16(p)) != len(fds)-before {
				return nil, fds, fmt.Errorf("takeover: descriptor message announced %v, carried %d", p, len(fds)-before)
			}
		case msgSnapshot:
			snap = append(snap, p...)
		case msgEnd:
			if len(p) != 8 || int(binary.BigEndian.Uint32(p)) != len(snap) || int(binary.BigEndian.Uint32(p[4:])) != len(fds) {
				return nil, fds, fmt.Errorf("takeover: got %d snapshot bytes and %d descriptors, the end message says otherwise", len(snap), len(fds))
			}
			return snap, fds, nil
		default:
			return nil, fds, fmt.Errorf("takeover: unexpected message %q", k)
		}
	}
}

// Ready tells the old process that the new one has everything and will
// serve.
func (c *Conn) Ready() error { return c.send(msgReady, nil, nil) }

// ExpectReady waits for Ready.
func (c *Conn) ExpectReady() error { _, err := c.expect(msgReady); return err }

// Bye tells the new process that the old one has stopped reading.
func (c *Conn) Bye() error { return c.send(msgBye, nil, nil) }

// ExpectBye waits for Bye.
func (c *Conn) ExpectBye() error { _, err := c.expect(msgBye); return err }

// Abort tells the other side why the hand-over stops here.
func (c *Conn) Abort(reason string) {
	_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.send(msgAbort, []byte(reason), nil)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
