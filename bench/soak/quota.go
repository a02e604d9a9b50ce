package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// QuotaResult is what the quota attacker got: one user on one address allocating as fast as
// the server answers until it is refused, then trying again at Config.QuotaRate.
type QuotaResult struct {
	// Held is the allocations it got (the per-address quota, if the server has one).
	Held int `json:"held"`
	// TimeToQuota is from its start to its first 486.
	TimeToQuota time.Duration `json:"time_to_quota_ns"`
	// Refused counts the error responses by code (486 Allocation Quota Reached, 508
	// Insufficient Capacity, ...); Timeouts the attempts left unanswered.
	Refused  map[int]int `json:"refused"`
	Timeouts int         `json:"timeouts"`
	Errors   []string    `json:"errors,omitempty"`
}

type quotaAttacker struct {
	cfg  Config
	mu   sync.Mutex
	res  QuotaResult
	held []*turnclient.Client
	// conns are the sockets of held allocations: a UDP allocation is its 5-tuple, so the
	// socket stays open (and its port taken) until the allocation is released.
	conns []*net.UDPConn
}

func (q *quotaAttacker) run(ctx context.Context) {
	q.res.Refused = map[int]int{}
	src := netip.AddrPortFrom(clientAddr(2, 0), 0)
	start := time.Now()
	var probe *turnclient.Client // one socket for the attempts after the quota: they hold nothing
	defer func() { q.release() }()
	for ctx.Err() == nil {
		c := probe
		var uc *net.UDPConn
		if c == nil {
			var err error
			if uc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(src)); err != nil {
				q.note(err)
				return
			}
			c = turnclient.New(uc, q.cfg.Server, q.cfg.Creds)
			c.Retries = 3
		}
		_, err := c.Allocate(0)
		var er *turnclient.ErrorResponse
		switch {
		case err == nil:
			q.mu.Lock()
			q.res.Held++
			q.held = append(q.held, c)
			if uc != nil {
				q.conns = append(q.conns, uc)
			}
			q.mu.Unlock()
			probe = nil
			continue
		case errors.As(err, &er):
			q.mu.Lock()
			if q.res.TimeToQuota == 0 {
				q.res.TimeToQuota = time.Since(start)
			}
			q.res.Refused[int(er.Code)]++
			q.mu.Unlock()
		case errors.Is(err, turnclient.ErrTimeout):
			q.mu.Lock()
			q.res.Timeouts++
			q.mu.Unlock()
		default:
			q.note(err)
		}
		if probe == nil {
			probe = c
			if uc != nil {
				q.mu.Lock()
				q.conns = append(q.conns, uc)
				q.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(float64(time.Second) / q.cfg.QuotaRate)):
		}
	}
}

func (q *quotaAttacker) note(err error) {
	q.mu.Lock()
	if len(q.res.Errors) < 5 {
		q.res.Errors = append(q.res.Errors, err.Error())
	}
	q.mu.Unlock()
}

// release deletes the held allocations (Refresh with LIFETIME 0) and closes the sockets.
func (q *quotaAttacker) release() {
	q.mu.Lock()
	held, conns := q.held, q.conns
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range held {
		wg.Add(1)
		go func() { defer wg.Done(); c.Retries = 2; _ = c.Refresh(0) }()
	}
	wg.Wait()
	for _, uc := range conns {
		uc.Close()
	}
}

func (q *quotaAttacker) progress() (held, refused int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, n := range q.res.Refused {
		refused += n
	}
	return q.res.Held, refused
}

func (q *quotaAttacker) result() QuotaResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.res
	r.Refused = map[int]int{}
	for k, v := range q.res.Refused {
		r.Refused[k] = v
	}
	return r
}

func (r QuotaResult) String() string {
	return fmt.Sprintf("held %d, refused %v, %d unanswered", r.Held, r.Refused, r.Timeouts)
}
