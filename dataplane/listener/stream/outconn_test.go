package stream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/listener/core"
)

// tcpPair returns a loopback connection's two ends: the server's, wrapped
// in an outConn, and the client's. Small socket buffers make a backlog
// form after some 100 KiB.
func tcpPair(t *testing.T) (*outConn, *net.TCPConn, chan struct{}) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadBuffer(32 << 10)
	_ = server.SetWriteBuffer(32 << 10)
	quit := make(chan struct{})
	o, err := newOutConn(server, quit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		client.Close()
		o.Close()
	})
	return o, client, quit
}

// frame is message i of size bytes: its number, then filler.
func frame(i uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, i)
	for j := 4; j < size; j++ {
		b[j] = byte(i)
	}
	return b
}

// TestOutConnKeepsOrder writes while the client does not read, so that
// most messages wait in the backlog, and checks that the client gets every
// byte in order (whole messages: droppable writes drop whole messages or
// none, and a message written in part is finished).
func TestOutConnKeepsOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		droppable bool
		size, n   int
	}{
		{"replies", false, 100, 3000},                          // 300 KB: past outBacklog, below outBacklogMax
		{"relayed, dropped past outBacklog", true, 1100, 1000}, // 1.1 MB: some dropped
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, client, _ := tcpPair(t)
			var sent []uint32
			dropped := 0
			for i := range tc.n {
				d, err := o.write(frame(uint32(i), tc.size), tc.droppable)
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				if d {
					dropped++
					continue
				}
				sent = append(sent, uint32(i))
			}
			if tc.droppable && dropped == 0 {
				t.Errorf("no message dropped of %d B written to a client that does not read", tc.size*tc.n)
			}
			if !tc.droppable && dropped != 0 {
				t.Errorf("%d messages dropped that may not be", dropped)
			}
			buf := make([]byte, tc.size)
			r := bufio.NewReaderSize(client, 64<<10)
			for _, want := range sent {
				if _, err := io.ReadFull(r, buf); err != nil {
					t.Fatalf("reading message %d: %v", want, err)
				}
				if got := binary.BigEndian.Uint32(buf); got != want || buf[tc.size-1] != byte(want) {
					t.Fatalf("got message %d (last byte %d), want %d", got, buf[tc.size-1], want)
				}
			}
		})
	}
}

// TestOutConnBacklogMax checks that writes which may not be dropped fail,
// rather than grow the backlog without bound, once outBacklogMax waits.
func TestOutConnBacklogMax(t *testing.T) {
	o, _, _ := tcpPair(t)
	msg := make([]byte, 1500)
	var err error
	for i := 0; err == nil && i < 2*outBacklogMax/len(msg); i++ {
		_, err = o.Write(msg)
	}
	if !errors.Is(err, errBacklog) {
		t.Fatalf("writing 2×outBacklogMax to a client that does not read: error %v, want %v", err, errBacklog)
	}
	if _, err := o.Write(msg); !errors.Is(err, errBacklog) {
		t.Errorf("write after the failure: %v, want %v", err, errBacklog)
	}
}

// TestOutConnRead checks that reads pass through: bytes that arrive after
// a read emptied the socket are read, a deadline gives a timeout after
// which reading goes on, and the end of the stream gives io.EOF. It caught
// a lost wake-up in an attempt to skip the read(2) that fails with EAGAIN
// after a short read through RawConn.Read: Go's poller forgets readiness
// that arrived before the call (pollDesc.prepareRead), so bytes that came
// between two reads waited for the next arrival.
func TestOutConnRead(t *testing.T) {
	o, client, _ := tcpPair(t)
	buf := make([]byte, 64)
	for i := range 50 {
		msg := frame(uint32(i), 10)
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(o, buf[:10]); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if got := binary.BigEndian.Uint32(buf); got != uint32(i) {
			t.Fatalf("read message %d, want %d", got, i)
		}
	}
	_ = o.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := o.Read(buf); !core.IsTimeout(err) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	_ = o.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if n, err := o.Read(buf); err != nil || string(buf[:n]) != "abc" {
		t.Fatalf("read after a timeout: %q, %v", buf[:n], err)
	}
	client.Close()
	n, err := o.Read(buf)
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read at the end of the stream: %d, %v; want io.EOF", n, err)
	}
}

// TestOutConnClosed checks that a write to a closed connection fails, and
// so does every later one, without writing anything.
func TestOutConnClosed(t *testing.T) {
	o, _, _ := tcpPair(t)
	o.Close()
	for i := range 2 {
		if _, err := o.Write([]byte("after close")); err == nil {
			t.Fatalf("write %d after Close: no error", i)
		}
	}
}
