package soak

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// halfFramer is issue 22's item 3: Config.HalfFrames TCP connections to the TURN-TCP
// listener (Config.ConnsPerIP per source address, from 127.7.x.y), each sending a STUN
// header that declares a halfFrameLen-byte message and then Config.HalfFrameBody bytes of
// it, and waiting. Before the fix each such connection held a 64 KiB frame buffer for 30 s:
// 10,000 of them took ternd from 21 MB to 734 MB. What is measured is ternd's RSS (it must
// stay below the budget) and how many of the connections ternd closed, and when.
type halfFramer struct {
	cfg Config

	opened, written, failed, closed atomic.Uint64
	held, heldMax                   atomic.Int64
	mu                              sync.Mutex
	closeAfter                      []time.Duration // from the last byte written to the server's close
}

// halfFrameLen is the length the header declares: a multiple of 4, as STUN requires, and
// near the 65,535 the 16-bit length allows.
const halfFrameLen = 65000

func (h *halfFramer) run(ctx context.Context) {
	if !h.cfg.TCPServer.IsValid() || h.cfg.HalfFrames <= 0 {
		return
	}
	sem := make(chan struct{}, 32)
	body := make([]byte, h.cfg.HalfFrameBody) // shared: only read
	var wg sync.WaitGroup
	for i := range h.cfg.HalfFrames {
		wg.Add(1)
		go func() { defer wg.Done(); h.one(ctx, i, sem, body) }()
	}
	wg.Wait()
}

// one opens connection i, sends the header and the part of the body, and waits for the
// server to close it or ctx to end; it is not reopened.
func (h *halfFramer) one(ctx context.Context, i int, sem chan struct{}, body []byte) {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	src := &net.TCPAddr{IP: clientAddr(7, i/h.cfg.ConnsPerIP).AsSlice()}
	d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp4", h.cfg.TCPServer.String())
	if err != nil {
		<-sem
		if ctx.Err() == nil {
			h.failed.Add(1)
		}
		return
	}
	defer c.Close()
	h.opened.Add(1)
	n := h.held.Add(1)
	for m := h.heldMax.Load(); n > m && !h.heldMax.CompareAndSwap(m, n); m = h.heldMax.Load() {
	}
	defer h.held.Add(-1)
	hdr := make([]byte, 20)
	binary.BigEndian.PutUint16(hdr[0:], 0x0001) // Binding request
	binary.BigEndian.PutUint16(hdr[2:], halfFrameLen)
	binary.BigEndian.PutUint32(hdr[4:], 0x2112A442)
	_, _ = rand.Read(hdr[8:20])
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	bufs := net.Buffers{hdr, body}
	_, err = bufs.WriteTo(c)
	<-sem
	if err != nil {
		if ctx.Err() == nil {
			h.closed.Add(1) // closed before the part was even written
		}
		return
	}
	h.written.Add(1)
	sent := time.Now()
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil && ctx.Err() == nil {
		h.closed.Add(1)
		h.mu.Lock()
		h.closeAfter = append(h.closeAfter, time.Since(sent))
		h.mu.Unlock()
	}
}

func (h *halfFramer) report(r *AttackResult) {
	h.mu.Lock()
	after := slices.Clone(h.closeAfter)
	h.mu.Unlock()
	slices.Sort(after)
	heldMax := h.heldMax.Load()
	grew := r.PeakRSS - r.BaseRSS
	r.Figures = map[string]float64{"conns": float64(h.cfg.HalfFrames), "body_bytes": float64(h.cfg.HalfFrameBody),
		"opened": float64(h.opened.Load()), "written": float64(h.written.Load()), "held_max": float64(heldMax),
		"closed_by_server": float64(h.closed.Load()), "rss_growth_bytes": float64(grew)}
	closes := "none closed by ternd during the attack"
	if len(after) > 0 {
		closes = fmt.Sprintf("%d closed by ternd, %v to %v after their last byte", len(after),
			after[0].Round(time.Millisecond), after[len(after)-1].Round(time.Millisecond))
	}
	perConn := ""
	if heldMax > 0 {
		perConn = fmt.Sprintf(" (%.1f KB per connection held)", float64(grew)/float64(heldMax)/1e3)
		r.Figures["rss_growth_per_conn_bytes"] = float64(grew) / float64(heldMax)
	}
	r.Summary = fmt.Sprintf("%d TCP connections each sending a header of %d bytes and %d of its body: %d written, at most %d held at once; %s; ternd RSS %.1f -> %.1f MB%s",
		h.cfg.HalfFrames, halfFrameLen, h.cfg.HalfFrameBody, h.written.Load(), heldMax, closes,
		float64(r.BaseRSS)/1e6, float64(r.PeakRSS)/1e6, perConn)
	if h.written.Load() == 0 {
		r.failf("no half-sent frame was written")
	}
}
