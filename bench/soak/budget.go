package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// budgetFiller is issue 22's item 5: a client with valid credentials on each of
// Config.BudgetAddrs addresses (127.9.0.x) allocates on the wide listener until refused, and
// fills each allocation with its 1,024 permissions (CreatePermission with 100 peers a
// request, to 127.200.0.0/22, which are never sent a packet) and Config.BudgetChannels
// channel bindings (to ports of the first of those IPs). Before the fix nothing bounded the total: 409,600
// channels took 54-60 MB and five addresses could pass 512 MiB. Each address must end refused
// (486 at its allocation quota, or 508 once a budget is spent), and ternd's RSS stay below
// the budget. Every allocation is released at the end.
type budgetFiller struct {
	cfg Config

	mu       sync.Mutex
	allocs   int
	perms    int
	channels int
	refused  map[int]int // code -> count
	// refusedBy counts the refusals by method and code ("ChannelBind 508").
	refusedBy map[string]int
	stopped   int // addresses that were refused
	errs      []string
	clients   []*turnclient.Client
	sockets   []*net.UDPConn
	released  int
}

// budgetWorkers is the clients per address allocating at once.
const budgetWorkers = 4

// budgetPeer is the i-th of the 1,024 permission peers, in 127.200.0.0/22.
func budgetPeer(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 200, byte(i >> 8), byte(i)}), 9)
}

// budgetChannelPeer is a channel's peer: port 10000 + i of the first permission's IP
// (127.200.0.0), so that a channel needs no permission beyond the 1,024.
func budgetChannelPeer(i int) netip.AddrPort {
	return netip.AddrPortFrom(budgetPeer(0).Addr(), uint16(10000+i))
}

func (b *budgetFiller) run(ctx context.Context) {
	b.refused, b.refusedBy = map[int]int{}, map[string]int{}
	if !b.cfg.WideServer.IsValid() || b.cfg.BudgetAddrs <= 0 {
		return
	}
	var wg sync.WaitGroup
	for a := range b.cfg.BudgetAddrs {
		actx, refused := context.WithCancel(ctx)
		var once sync.Once
		stop := func() { once.Do(func() { b.mu.Lock(); b.stopped++; b.mu.Unlock(); refused() }) }
		var aw sync.WaitGroup
		for range budgetWorkers {
			aw.Add(1)
			go func() { defer aw.Done(); b.fill(actx, clientAddr(9, a), stop) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); aw.Wait(); refused() }()
	}
	wg.Wait()
	b.release()
}

// fill allocates from src and fills each allocation until a request is refused, then calls stop.
func (b *budgetFiller) fill(ctx context.Context, src netip.Addr, stop func()) {
	for ctx.Err() == nil {
		uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
		if err != nil {
			b.note(err)
			return
		}
		c := turnclient.New(uc, b.cfg.WideServer, b.cfg.Creds)
		c.Retries = 3
		if _, err := c.Allocate(0); err != nil {
			uc.Close()
			if b.refusal(err) {
				stop()
			}
			return
		}
		b.mu.Lock()
		b.allocs++
		b.clients = append(b.clients, c)
		b.sockets = append(b.sockets, uc)
		b.mu.Unlock()
		for i := 0; i < 1024 && ctx.Err() == nil; i += 100 {
			peers := make([]netip.AddrPort, 0, 100)
			for j := i; j < min(i+100, 1024); j++ {
				peers = append(peers, budgetPeer(j))
			}
			if err := c.CreatePermissions(peers...); err != nil {
				if b.refusal(err) {
					stop()
				}
				return
			}
			b.mu.Lock()
			b.perms += len(peers)
			b.mu.Unlock()
		}
		for ch := 0; ch < b.cfg.BudgetChannels && ctx.Err() == nil; ch++ {
			if err := c.ChannelBind(budgetChannelPeer(ch), uint16(0x4000+ch)); err != nil {
				if b.refusal(err) {
					stop()
				}
				return
			}
			b.mu.Lock()
			b.channels++
			b.mu.Unlock()
		}
	}
}

// refusal counts err and reports whether it is a refusal for capacity (486 or 508).
func (b *budgetFiller) refusal(err error) bool {
	var er *turnclient.ErrorResponse
	if !errors.As(err, &er) {
		b.note(err)
		return false
	}
	b.mu.Lock()
	b.refused[int(er.Code)]++
	b.refusedBy[er.Method.String()+" "+fmt.Sprint(int(er.Code))]++
	b.mu.Unlock()
	if er.Code != 486 && er.Code != 508 {
		b.note(err)
		return false
	}
	return true
}

func (b *budgetFiller) note(err error) {
	b.mu.Lock()
	if len(b.errs) < 5 {
		b.errs = append(b.errs, err.Error())
	}
	b.mu.Unlock()
}

// release deletes every allocation (Refresh with LIFETIME 0), 32 at a time.
func (b *budgetFiller) release() {
	b.mu.Lock()
	clients, sockets := b.clients, b.sockets
	b.mu.Unlock()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range clients {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.Retries = 2
			if c.Refresh(0) == nil {
				mu.Lock()
				b.released++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, uc := range sockets {
		uc.Close()
	}
}

// timeLimit: the attack runs until every address is refused, which takes longer than the
// other attacks' few seconds on a loaded machine.
func (b *budgetFiller) timeLimit(d time.Duration) time.Duration { return 6 * d }

func (b *budgetFiller) report(r *AttackResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.Figures = map[string]float64{"addresses": float64(b.cfg.BudgetAddrs), "allocations": float64(b.allocs),
		"permissions": float64(b.perms), "channels": float64(b.channels), "addresses_refused": float64(b.stopped),
		"released": float64(b.released), "rss_growth_bytes": float64(r.PeakRSS - r.BaseRSS)}
	for code, n := range b.refused {
		r.Figures[fmt.Sprintf("refused_%d", code)] = float64(n)
	}
	by := make([]string, 0, len(b.refusedBy))
	for _, k := range slices.Sorted(maps.Keys(b.refusedBy)) {
		by = append(by, fmt.Sprintf("%s ×%d", k, b.refusedBy[k]))
	}
	r.Summary = fmt.Sprintf("%d addresses with valid credentials: %d allocations, %d permissions, %d channels before refusal (%s); %d of %d addresses refused; ternd RSS %.1f -> %.1f MB",
		b.cfg.BudgetAddrs, b.allocs, b.perms, b.channels, strings.Join(by, ", "), b.stopped, b.cfg.BudgetAddrs,
		float64(r.BaseRSS)/1e6, float64(r.PeakRSS)/1e6)
	if b.stopped < b.cfg.BudgetAddrs {
		r.failf("%d of %d addresses were never refused with 486 or 508 (errors: %v)", b.cfg.BudgetAddrs-b.stopped, b.cfg.BudgetAddrs, b.errs)
	}
}
