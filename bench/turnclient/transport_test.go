package turnclient

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameReader(t *testing.T) {
	cd := PadChannelData(ChannelData(0x4000, []byte("hello"))) // 9 bytes, padded to 12
	if len(cd) != 12 {
		t.Fatalf("padded ChannelData is %d bytes, want 12", len(cd))
	}
	stunMsg := []byte{0x01, 0x01, 0x00, 0x04, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xde, 0xad, 0xbe, 0xef}
	stream := append(append(append([]byte{}, cd...), stunMsg...), cd...)
	f := NewFrameReader(bytes.NewReader(stream))
	buf := make([]byte, 64)
	for i, want := range [][]byte{cd[:9], stunMsg, cd[:9]} {
		n, err := f.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("frame %d: %x, %v; want %x", i, buf[:n], err, want)
		}
	}
	if _, err := f.Read(buf); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}

	for _, tc := range []struct {
		name string
		in   []byte
		buf  int
		want error
	}{
		{"bad leading bits", []byte{0x80, 0, 0, 0}, 64, ErrFrame},
		{"STUN length not a multiple of 4", []byte{0x00, 0x01, 0x00, 0x03}, 64, ErrFrame},
		{"short buffer", cd, 8, io.ErrShortBuffer},
		{"truncated", cd[:6], 64, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFrameReader(bytes.NewReader(tc.in)).Read(make([]byte, tc.buf))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzFrameReader feeds arbitrary streams to the framer: it must never
// panic, never return more than the buffer, and a frame it returns must
// carry the length its header says.
func FuzzFrameReader(f *testing.F) {
	f.Add(PadChannelData(ChannelData(0x4001, []byte("abc"))))
	f.Add([]byte{0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0x40, 0x00, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewFrameReader(bytes.NewReader(in))
		buf := make([]byte, 1500)
		for i := 0; i < 100; i++ {
			n, err := r.Read(buf)
			if errors.Is(err, io.ErrShortBuffer) {
				continue
			}
			if err != nil {
				return
			}
			if want, _, ok := FrameLen(buf[:4]); !ok || n != want || n > len(buf) {
				t.Fatalf("frame of %d bytes, header says %d (ok %v)", n, want, ok)
			}
		}
	})
}
