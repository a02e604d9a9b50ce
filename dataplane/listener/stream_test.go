package listener

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestReadFrame(t *testing.T) {
	stunMsg := func(bodyLen int) []byte {
		b := make([]byte, 20+bodyLen)
		binary.BigEndian.PutUint16(b[0:2], 0x0001)
		binary.BigEndian.PutUint16(b[2:4], uint16(bodyLen))
		binary.BigEndian.PutUint32(b[4:8], 0x2112A442)
		return b
	}
	chanData := func(n int, padded bool) []byte {
		b := make([]byte, 4+n)
		binary.BigEndian.PutUint16(b[0:2], 0x4001)
		binary.BigEndian.PutUint16(b[2:4], uint16(n))
		for len(b)%4 != 0 && padded {
			b = append(b, 0)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   []int // lengths of the frames read, padding excluded
		err    error // after them
	}{
		{"one STUN message", stunMsg(8), []int{28}, io.EOF},
		{"ChannelData padding skipped", append(chanData(5, true), stunMsg(0)...), []int{9, 20}, io.EOF},
		{"aligned ChannelData", append(chanData(8, true), chanData(8, true)...), []int{12, 12}, io.EOF},
		{"neither STUN nor ChannelData", []byte{0x80, 0, 0, 0}, nil, errBadFrame},
		{"cut short", stunMsg(8)[:10], nil, io.ErrUnexpectedEOF},
		{"larger than the buffer", stunMsg(0x100), nil, errBadFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(bytes.NewReader(tc.stream))
			buf := make([]byte, 0x100)
			for i, want := range tc.want {
				n, err := readFrame(r, buf)
				if err != nil || n != want {
					t.Fatalf("frame %d: %d bytes, %v; want %d", i, n, err, want)
				}
			}
			if _, err := readFrame(r, buf); !errors.Is(err, tc.err) {
				t.Errorf("after the frames: %v, want %v", err, tc.err)
			}
		})
	}
}

// FuzzReadFrame feeds arbitrary byte streams to the TURN-TCP/TLS framer: it
// must never panic or read past a frame, and each frame it returns must fit
// its buffer and start like STUN or ChannelData.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0x40, 0x01, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0})
	f.Add([]byte{0x40, 0x01, 0xff, 0xff})
	f.Add([]byte{0xC0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bufio.NewReader(bytes.NewReader(stream))
		buf := make([]byte, maxStreamMessage)
		consumed := 0
		for {
			n, err := readFrame(r, buf)
			if err != nil {
				return
			}
			if n < 4 || n > len(buf) || buf[0]>>6 > 1 {
				t.Fatalf("frame of %d bytes starting %#x", n, buf[0])
			}
			consumed += n
			if consumed > len(stream) {
				t.Fatalf("read %d bytes of frames from a %d-byte stream", consumed, len(stream))
			}
		}
	})
}
