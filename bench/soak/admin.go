package soak

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/procstat"
	"github.com/tern-gw/tern/bench/turnclient"
)

// adminHolder is issue 22's item 2: Config.AdminConns keep-alive connections to the health
// endpoint (8 per source address, from 127.6.x.y), each sending one request and then
// staying idle, reopened a second after the server closes it. Before the fix every one was
// held (19,976 brought ternd to its descriptor limit and TCP and TLS Allocates got 508).
// Meanwhile legitimate TCP and TLS allocations, each on a new connection, must succeed, and
// ternd's descriptors stay below its limit. The metrics endpoint is left alone: the soak
// scrapes it.
type adminHolder struct {
	cfg    Config
	probes prober

	opened, answered, closedEarly, closed, failed atomic.Uint64
	held, heldMax                                 atomic.Int64
}

const adminPerIP = 8

func (h *adminHolder) run(ctx context.Context) {
	h.probes.cfg = h.cfg
	if !h.cfg.HealthAddr.IsValid() || h.cfg.AdminConns <= 0 {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.probes.run(ctx, 250*time.Millisecond, turnclient.TCP, turnclient.TLS) }()
	sem := make(chan struct{}, 32) // connects in flight: the ramp is not a SYN flood of its own
	for i := range h.cfg.AdminConns {
		wg.Add(1)
		go func() { defer wg.Done(); h.hold(ctx, i, sem) }()
	}
	wg.Wait()
}

// hold keeps connection i open until ctx ends, reopening it a second after the server closes it.
func (h *adminHolder) hold(ctx context.Context, i int, sem chan struct{}) {
	src := &net.TCPAddr{IP: clientAddr(6, i/adminPerIP).AsSlice()}
	req := []byte("GET /live HTTP/1.1\r\nHost: soak\r\nConnection: keep-alive\r\n\r\n")
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp4", h.cfg.HealthAddr.String())
		<-sem
		if err != nil {
			if ctx.Err() == nil {
				h.failed.Add(1)
			}
			sleep(ctx, time.Second)
			continue
		}
		h.opened.Add(1)
		n := h.held.Add(1)
		for m := h.heldMax.Load(); n > m && !h.heldMax.CompareAndSwap(m, n); m = h.heldMax.Load() {
		}
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		_, _ = c.Write(req)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			h.answered.Add(1)
			resp.Body.Close()
			// Idle, as the attacker of the issue: wait for the server to close it.
			_, err = br.ReadByte()
			if ctx.Err() == nil && err != nil {
				h.closed.Add(1)
			}
		} else if ctx.Err() == nil {
			h.closedEarly.Add(1)
		}
		stop()
		c.Close()
		h.held.Add(-1)
		sleep(ctx, time.Second)
	}
}

func (h *adminHolder) report(r *AttackResult) {
	r.Figures = map[string]float64{"conns": float64(h.cfg.AdminConns), "opened": float64(h.opened.Load()),
		"answered": float64(h.answered.Load()), "closed_unanswered": float64(h.closedEarly.Load()),
		"closed_after_answer": float64(h.closed.Load()), "held_max_attacker_side": float64(h.heldMax.Load())}
	probes := h.probes.report(r)
	limit, _ := procstat.MaxFDs(h.cfg.PID)
	r.Figures["server_fds_peak"], r.Figures["server_fd_limit"] = float64(r.PeakFDs), float64(limit)
	r.Summary = fmt.Sprintf("%d keep-alive connections to the health port from %d addresses: %d opened, %d answered, %d closed by the server unanswered; ternd's descriptors peaked at %d (limit %d); %s",
		h.cfg.AdminConns, (h.cfg.AdminConns+adminPerIP-1)/adminPerIP, h.opened.Load(), h.answered.Load(), h.closedEarly.Load(),
		r.PeakFDs, limit, probes)
	if h.opened.Load() == 0 {
		r.failf("no connection to the health port was opened")
	}
	if limit > 0 && r.PeakFDs >= limit {
		r.failf("ternd reached its descriptor limit (%d of %d)", r.PeakFDs, limit)
	}
}
