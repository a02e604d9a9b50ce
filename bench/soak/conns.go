package soak

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/stun/v2"
)

// ConnsResult is what the idle-connection attacker managed: TCP connections to the TURN-TCP
// listener that send a Binding request now and then and never allocate.
type ConnsResult struct {
	// Opened counts successful connects (the first ones and every reopening); Failed the
	// connects or first Bindings that failed.
	Opened uint64 `json:"opened"`
	Failed uint64 `json:"failed"`
	// Closed counts connections the server closed (idle timeout, shedding, a limit),
	// noticed at the next Binding.
	Closed uint64 `json:"closed"`
	// HeldMin and HeldMax are the fewest and most connections open at once, sampled after
	// the ramp.
	HeldMin int `json:"held_min"`
	HeldMax int `json:"held_max"`
}

type connHolder struct {
	cfg                    Config
	opened, failed, closed atomic.Uint64
	held, firstDone        atomic.Int64
	rampDone               atomic.Bool
	mu                     sync.Mutex
	heldMin, heldMax       int
}

// binding is a STUN Binding request: what an attacker without credentials can send to keep a
// connection from looking idle.
var binding = stun.MustBuild(stun.TransactionID, stun.BindingRequest).Raw

func (h *connHolder) run(ctx context.Context) {
	// Connects are paced by a semaphore so the ramp is not a SYN flood of its own.
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range h.cfg.IdleConns {
		wg.Add(1)
		go func() { defer wg.Done(); h.hold(ctx, i, sem) }()
	}
	wg.Wait()
}

// hold keeps connection i open until ctx ends: connect, Binding, then a Binding every
// KeepAlive (with jitter); when the server closes it, connect again after a second.
func (h *connHolder) hold(ctx context.Context, i int, sem chan struct{}) {
	src := &net.TCPAddr{IP: clientAddr(4, i/h.cfg.ConnsPerIP).AsSlice()}
	server := h.cfg.TCPServer.String()
	buf := make([]byte, 256)
	first := true
	for ctx.Err() == nil {
		if first {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp4", server)
		if err == nil {
			err = exchange(c, buf)
			if err != nil {
				c.Close()
			}
		}
		if first {
			<-sem
			first = false
			if h.firstDone.Add(1) == int64(h.cfg.IdleConns) {
				h.rampDone.Store(true)
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				h.failed.Add(1)
			}
			sleep(ctx, time.Second)
			continue
		}
		h.opened.Add(1)
		h.held.Add(1)
		closed := h.keep(ctx, c, buf)
		h.held.Add(-1)
		c.Close()
		if closed {
			h.closed.Add(1)
			sleep(ctx, time.Second)
		}
	}
}

// keep sends a Binding every KeepAlive until ctx ends (false) or the server closes c (true).
// With KeepAlive 0 it only waits for the server to close c.
func (h *connHolder) keep(ctx context.Context, c net.Conn, buf []byte) bool {
	if h.cfg.KeepAlive <= 0 {
		stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
		_, err := c.Read(buf)
		return ctx.Err() == nil && err != nil
	}
	for {
		jitter := time.Duration(rand.Int64N(int64(h.cfg.KeepAlive / 5)))
		if !sleep(ctx, h.cfg.KeepAlive-jitter) {
			return false
		}
		if err := exchange(c, buf); err != nil {
			return ctx.Err() == nil
		}
	}
}

// exchange sends a Binding request on c and reads the whole response.
func exchange(c net.Conn, buf []byte) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(binding); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf[:20]); err != nil {
		return err
	}
	n := int(buf[2])<<8 | int(buf[3])
	if n > len(buf) {
		return errors.New("response too long")
	}
	_, err := io.ReadFull(c, buf[:n])
	return err
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// observe records the connections held, for HeldMin and HeldMax once the ramp is done.
func (h *connHolder) observe() int {
	n := int(h.held.Load())
	if h.rampDone.Load() {
		h.mu.Lock()
		if h.heldMax == 0 || n < h.heldMin {
			h.heldMin = n
		}
		h.heldMax = max(h.heldMax, n)
		h.mu.Unlock()
	}
	return n
}

func (h *connHolder) result() ConnsResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	return ConnsResult{Opened: h.opened.Load(), Failed: h.failed.Load(), Closed: h.closed.Load(),
		HeldMin: h.heldMin, HeldMax: h.heldMax}
}
