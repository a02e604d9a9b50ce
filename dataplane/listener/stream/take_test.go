package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// takeAll splits stream into frames as an event loop does (frameReader.take
// after each read of at most chunk bytes into the reader's own buffer),
// returning copies of the frames and the error that ended them: nil at the
// end of the stream between frames, io.ErrUnexpectedEOF within one.
func takeAll(t *testing.T, stream []byte, chunk int) ([][]byte, error) {
	t.Helper()
	var f frameReader
	defer f.release()
	var frames [][]byte
	for len(stream) > 0 {
		if f.buf == nil {
			f.buf = bufPools[0].Get().(*[]byte)
			f.class, f.r, f.w = 0, 0, 0
		}
		room := (*f.buf)[f.w:]
		if len(room) == 0 {
			t.Fatal("take left no room to read into")
		}
		n := copy(room[:min(len(room), chunk)], stream)
		stream = stream[n:]
		f.w += n
		for {
			b, err := f.take(time.Now)
			if err != nil {
				return frames, err
			}
			if b == nil {
				break
			}
			if cap(b) != len(b) {
				t.Fatalf("frame %d has room for %d more bytes, over the frames after it", len(frames), cap(b)-len(b))
			}
			frames = append(frames, bytes.Clone(b))
		}
	}
	if f.buf != nil && f.r != f.w {
		if f.partial.IsZero() {
			t.Error("a frame begun, but no time noted for the partial-frame limit")
		}
		return frames, io.ErrUnexpectedEOF
	}
	return frames, nil
}

// TestFrameReaderTake: the event loop's framing (take) splits streams,
// in reads of any size, into the frames next does.
func TestFrameReaderTake(t *testing.T) {
	var many [][]byte
	for range 9 {
		many = append(many, chanData(997, true))
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   []int
		err    error
	}{
		{"one STUN message", stunMsg(8), []int{28}, nil},
		{"ChannelData padding skipped", concat(chanData(5, true), stunMsg(0)), []int{9, 20}, nil},
		{"frames across the buffer's end", concat(many...), []int{1001, 1001, 1001, 1001, 1001, 1001, 1001, 1001, 1001}, nil},
		{"larger than the small buffer", concat(stunMsg(9000), chanData(3, true), stunMsg(0xFFFC)), []int{9020, 7, 20 + 0xFFFC}, nil},
		{"largest ChannelData", chanData(0xFFFF, true), []int{4 + 0xFFFF}, nil},
		{"neither STUN nor ChannelData", []byte{0x80, 0, 0, 0}, nil, errBadFrame},
		{"STUN length not a multiple of 4", concat(stunMsg(8), stunMsg(6)), []int{28}, errBadFrame},
		{"cut short", stunMsg(8)[:10], nil, io.ErrUnexpectedEOF},
		{"header cut short", []byte{0, 1}, nil, io.ErrUnexpectedEOF},
	} {
		for _, chunk := range []int{1, 3, 1500, 1 << 20} {
			t.Run(tc.name, func(t *testing.T) {
				frames, err := takeAll(t, tc.stream, chunk)
				if !errors.Is(err, tc.err) {
					t.Errorf("chunks of %d: %v, want %v", chunk, err, tc.err)
				}
				if len(frames) != len(tc.want) {
					t.Fatalf("chunks of %d: %d frames, want %d", chunk, len(frames), len(tc.want))
				}
				off := 0
				for i, b := range frames {
					if len(b) != tc.want[i] || !bytes.Equal(b, tc.stream[off:off+len(b)]) {
						t.Fatalf("chunks of %d: frame %d: %d bytes, want %d of the stream", chunk, i, len(b), tc.want[i])
					}
					off = (off + len(b) + 3) &^ 3
				}
			})
		}
	}
}

// FuzzTakeFrame: on any byte stream, in reads of any size, the event
// loop's framing (take) returns the frames the reader goroutine's (next)
// does, and ends with the same error.
func FuzzTakeFrame(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0x40, 0x01, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0})
	f.Add([]byte{0x40, 0x01, 0xff, 0xff})
	f.Add([]byte{0xC0, 0, 0, 0})
	f.Add(concat([]byte{1}, stunMsg(9000)[1:5000]))
	f.Fuzz(func(t *testing.T, stream []byte) {
		chunk := 1 << 20
		if len(stream) > 0 {
			chunk = int(stream[0]) + 1
		}
		got, gotErr := takeAll(t, stream, chunk)
		fr := frameReader{conn: &chunkConn{r: bytes.NewReader(stream), chunk: chunk}}
		defer fr.release()
		var want [][]byte
		var wantErr error
		for {
			b, err := fr.next(time.Time{})
			if err != nil {
				if !errors.Is(err, io.EOF) {
					wantErr = err
				}
				break
			}
			want = append(want, bytes.Clone(b))
		}
		if !errors.Is(gotErr, wantErr) && !(gotErr == nil && wantErr == nil) {
			t.Fatalf("take ended with %v, next with %v", gotErr, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("take returned %d frames, next %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d differs", i)
			}
		}
	})
}
