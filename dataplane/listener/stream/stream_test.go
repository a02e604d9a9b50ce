package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// chunkConn is a net.Conn reading from a byte stream at most chunk bytes
// per Read, as a TCP socket may hand them out.
type chunkConn struct {
	net.Conn // nil: only Read and SetReadDeadline are used
	r        *bytes.Reader
	chunk    int
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if len(b) > c.chunk {
		b = b[:c.chunk]
	}
	return c.r.Read(b)
}
func (c *chunkConn) SetReadDeadline(time.Time) error { return nil }

func stunMsg(bodyLen int) []byte {
	b := make([]byte, 20+bodyLen)
	binary.BigEndian.PutUint16(b[0:2], 0x0001)
	binary.BigEndian.PutUint16(b[2:4], uint16(bodyLen))
	binary.BigEndian.PutUint32(b[4:8], 0x2112A442)
	for i := 20; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

func chanData(n int, padded bool) []byte {
	b := make([]byte, 4+n)
	binary.BigEndian.PutUint16(b[0:2], 0x4001)
	binary.BigEndian.PutUint16(b[2:4], uint16(n))
	for len(b)%4 != 0 && padded {
		b = append(b, 0)
	}
	return b
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func TestFrameReader(t *testing.T) {
	// Enough 1,000-byte frames that some straddle the end of the small buffer.
	var many [][]byte
	var manyLens []int
	for range 9 {
		many = append(many, chanData(997, true))
		manyLens = append(manyLens, 1001)
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   []int // lengths of the frames read, padding excluded
		err    error // after them
	}{
		{"one STUN message", stunMsg(8), []int{28}, io.EOF},
		{"ChannelData padding skipped", concat(chanData(5, true), stunMsg(0)), []int{9, 20}, io.EOF},
		{"aligned ChannelData", concat(chanData(8, true), chanData(8, true)), []int{12, 12}, io.EOF},
		{"frames across the buffer's end", concat(many...), manyLens, io.EOF},
		{"larger than the small buffer", concat(stunMsg(9000), chanData(3, true), stunMsg(0xFFFC)), []int{9020, 7, 20 + 0xFFFC}, io.EOF},
		{"largest ChannelData", chanData(0xFFFF, true), []int{4 + 0xFFFF}, io.EOF},
		{"neither STUN nor ChannelData", []byte{0x80, 0, 0, 0}, nil, errBadFrame},
		{"STUN length not a multiple of 4", concat(stunMsg(8), stunMsg(6)), []int{28}, errBadFrame},
		{"cut short", stunMsg(8)[:10], nil, io.ErrUnexpectedEOF},
		{"header cut short", []byte{0, 1}, nil, io.ErrUnexpectedEOF},
	} {
		for _, chunk := range []int{1, 3, 1500, 1 << 20} {
			t.Run(tc.name, func(t *testing.T) {
				f := frameReader{conn: &chunkConn{r: bytes.NewReader(tc.stream), chunk: chunk}}
				off := 0
				for i, want := range tc.want {
					b, err := f.next(time.Time{})
					if err != nil || len(b) != want {
						t.Fatalf("chunks of %d: frame %d: %d bytes, %v; want %d", chunk, i, len(b), err, want)
					}
					if cap(b) != len(b) {
						t.Fatalf("chunks of %d: frame %d has room for %d more bytes, over the frames after it", chunk, i, cap(b)-len(b))
					}
					if !bytes.Equal(b, tc.stream[off:off+want]) {
						t.Fatalf("chunks of %d: frame %d differs from the stream", chunk, i)
					}
					off += want
					off = (off + 3) &^ 3 // only ChannelData is padded, and these STUN lengths are aligned
				}
				if _, err := f.next(time.Time{}); !errors.Is(err, tc.err) {
					t.Errorf("chunks of %d: after the frames: %v, want %v", chunk, err, tc.err)
				}
				if f.buf != nil && len(*f.buf) > smallReadBuffer {
					t.Errorf("chunks of %d: a large buffer is still held after its frame", chunk)
				}
				f.release()
			})
		}
	}
}

// TestFrameReaderLetsGo: a connection that has been silent for longer than
// bufferHold, so that its reader gave its buffer back at a read timeout,
// still reads the next frame.
func TestFrameReaderLetsGo(t *testing.T) {
	srv, cl := net.Pipe()
	defer srv.Close()
	defer cl.Close()
	f := frameReader{conn: srv}
	got := make(chan error, 2)
	go func() {
		for range 2 {
			_, err := f.next(time.Now().Add(10 * time.Second))
			got <- err
		}
	}()
	if _, err := cl.Write(stunMsg(4)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	time.Sleep(bufferHold + 300*time.Millisecond)
	if _, err := cl.Write(stunMsg(8)); err != nil { // the write waits for the reader: f is settled
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// FuzzReadFrame feeds arbitrary byte streams to the TURN-TCP/TLS framer,
// in reads of arbitrary sizes: it must never panic or read past a frame,
// and each frame it returns must start like STUN or ChannelData.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0x40, 0x01, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0})
	f.Add([]byte{0x40, 0x01, 0xff, 0xff})
	f.Add([]byte{0xC0, 0, 0, 0})
	f.Add(concat([]byte{1}, stunMsg(9000)[1:5000])) // a frame that grows its buffer, cut short
	f.Fuzz(func(t *testing.T, stream []byte) {
		chunk := 1 << 20
		if len(stream) > 0 {
			chunk = int(stream[0]) + 1
		}
		fr := frameReader{conn: &chunkConn{r: bytes.NewReader(stream), chunk: chunk}}
		defer fr.release()
		consumed := 0
		for {
			b, err := fr.next(time.Time{})
			if err != nil {
				return
			}
			if len(b) < 4 || b[0]>>6 > 1 {
				t.Fatalf("frame of %d bytes starting %#x", len(b), b[0])
			}
			consumed += len(b)
			if consumed > len(stream) {
				t.Fatalf("read %d bytes of frames from a %d-byte stream", consumed, len(stream))
			}
		}
	})
}

// growConn hands out a byte stream in reads of at most chunk bytes and
// checks, at each Read, that the reader's buffer is no larger than the
// bytes delivered so far call for: the small buffer, or twice them (plus
// 20: the largest buffer holds the largest STUN message, 20 + 0xFFFF).
type growConn struct {
	chunkConn
	t         *testing.T
	delivered int
}

func (c *growConn) Read(b []byte) (int, error) {
	// b is the free end of the reader's buffer, which holds the unread
	// bytes of one frame: its whole length is len(b) + what is unread,
	// at most what has been delivered.
	if size := len(b) + c.delivered; size > max(smallReadBuffer, 2*c.delivered+20) && c.delivered > 0 {
		c.t.Fatalf("after %d bytes the reader holds a buffer of up to %d", c.delivered, size)
	}
	n, err := c.chunkConn.Read(b)
	c.delivered += n
	return n, err
}

// TestFrameReaderGrowsWithBytes: a frame declaring 65,000 bytes does not
// take a buffer of that size when its header arrives; the buffer grows,
// at most doubling what has arrived, and the frame still reads whole
// (issue 22, item 3).
func TestFrameReaderGrowsWithBytes(t *testing.T) {
	for _, chunk := range []int{1000, 4096, 5000} {
		msg := stunMsg(64980)
		c := &growConn{chunkConn: chunkConn{r: bytes.NewReader(msg), chunk: chunk}, t: t}
		f := frameReader{conn: c}
		b, err := f.next(time.Time{})
		if err != nil || !bytes.Equal(b, msg) {
			t.Fatalf("chunks of %d: %d bytes, %v; want the %d-byte frame", chunk, len(b), err, len(msg))
		}
		f.release()
	}
}

// TestFrameReaderStalledFrame: a frame whose header and a few bytes came
// but not the rest ends the read with errStalledFrame once partialLimit
// has passed, long before the connection's idle deadline; one that keeps
// coming in pieces within the limit reads whole.
func TestFrameReaderStalledFrame(t *testing.T) {
	t.Run("stalled", func(t *testing.T) {
		srv, cl := net.Pipe()
		defer srv.Close()
		defer cl.Close()
		f := frameReader{conn: srv, partialLimit: 300 * time.Millisecond}
		defer f.release()
		got := make(chan error, 1)
		go func() {
			_, err := f.next(time.Now().Add(30 * time.Second))
			got <- err
		}()
		if _, err := cl.Write(stunMsg(64980)[:28]); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, errStalledFrame) {
				t.Fatalf("half-sent frame: %v, want errStalledFrame", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("half-sent frame still waited for 10 s, partial-frame limit 300 ms")
		}
	})
	t.Run("slow but in time", func(t *testing.T) {
		srv, cl := net.Pipe()
		defer srv.Close()
		defer cl.Close()
		f := frameReader{conn: srv, partialLimit: 30 * time.Second}
		defer f.release()
		msg := stunMsg(64980)
		go func() {
			for p := msg; len(p) > 0; p = p[min(len(p), 5000):] {
				if _, err := cl.Write(p[:min(len(p), 5000)]); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		b, err := f.next(time.Now().Add(60 * time.Second))
		if err != nil || !bytes.Equal(b, msg) {
			t.Fatalf("%d bytes, %v; want the %d-byte frame", len(b), err, len(msg))
		}
	})
}

// TestFrameReaderBudget: a frame whose buffer would take the grown buffers
// of all connections past grownBudget ends its read with errFrameBudget,
// while a frame that fits still reads; every byte counted in grown comes
// back when the readers release their buffers.
func TestFrameReaderBudget(t *testing.T) {
	defer func(b int64) { grownBudget = b }(grownBudget)
	start := grown.Load()
	grownBudget = start + 48<<10 // one frame in a 32 KiB buffer, then the next one's 16 KiB but not its 32 KiB
	msg := stunMsg(30000)
	var held []*frameReader
	for _, want := range []error{nil, errFrameBudget} {
		stream := concat(msg, stunMsg(0xFFFC)[:100]) // another frame begun: its buffer is kept
		f := &frameReader{conn: &chunkConn{r: bytes.NewReader(stream), chunk: 1 << 20}}
		held = append(held, f)
		b, err := f.next(time.Time{})
		if !errors.Is(err, want) {
			t.Fatalf("%d bytes, %v; want %v", len(b), err, want)
		}
	}
	if got := grown.Load() - start; got != 48<<10 {
		t.Errorf("grown buffers: %d bytes, want the 32 KiB and 16 KiB buffers held", got)
	}
	for _, f := range held {
		f.release()
	}
	if got := grown.Load(); got != start {
		t.Errorf("grown buffers after release: %d bytes, want %d", got, start)
	}
}
