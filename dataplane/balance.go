package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
)

// Balancing the replicas of a Gateway (limits.allocationImbalancePercent,
// issue 26). Kubernetes spreads new clients over a Gateway's replicas by
// the Service's hashing, or not at all when clients name nodes; replicas
// that started later, or that a client population favours, end up with far
// fewer allocations than the others, and calls outlive any rebalancing
// Kubernetes could do. So each ternd asks its alternates (the other
// replicas, from the config's alternates) how many allocations they hold,
// through their /status at its own health port, and while it holds
// clearly more than the mean it sends new clients' first Allocate to the
// replicas below the mean with 300 Try Alternate (turn.Engine.SetPreferred).
// An alternate that does not answer within balanceTimeout is left out of
// the mean and never preferred.

const (
	// balancePeriod is how often the peers' counts are read.
	balancePeriod = 2 * time.Second
	// balanceTimeout bounds one peer's answer.
	balanceTimeout = time.Second
	// balanceFloor is how many allocations above the mean a server must
	// hold before it redirects, so that a few calls never bounce clients
	// between lightly loaded replicas.
	balanceFloor = 10
	// statusLimit bounds a peer's /status body, bytes.
	statusLimit = 1 << 20
)

// balance reads the peers' allocation counts every balancePeriod and sets
// the engine's preferred alternates, until the server stops.
func (s *Server) balance() {
	defer s.bg.Done()
	client := &http.Client{Timeout: balanceTimeout}
	tick := time.NewTicker(balancePeriod)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.balanceOnce(client)
	}
}

// balanceOnce is one round of balance.
func (s *Server) balanceOnce(client *http.Client) {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	alts := s.engine.Alternates()
	port := healthPort(cfg)
	if cfg.Limits.AllocationImbalancePercent <= 0 || len(alts) == 0 || port == 0 || s.draining.Load() {
		s.setPreferred(nil, 0, 0)
		return
	}
	counts := make([]int, len(alts))
	var wg sync.WaitGroup
	for i, a := range alts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := peerAllocations(client, a.Addr(), port)
			if err != nil {
				n = -1
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	own := s.engine.Allocations()
	total, answered := own, 1
	for _, n := range counts {
		if n >= 0 {
			total += n
			answered++
		}
	}
	mean := float64(total) / float64(answered)
	var preferred []netip.AddrPort
	if float64(own) > mean*(1+float64(cfg.Limits.AllocationImbalancePercent)/100) && float64(own)-mean >= balanceFloor {
		for i, n := range counts {
			if n >= 0 && float64(n) < mean {
				preferred = append(preferred, alts[i])
			}
		}
	}
	s.setPreferred(preferred, own, mean)
}

// setPreferred sets the engine's preferred alternates and logs a change.
func (s *Server) setPreferred(preferred []netip.AddrPort, own int, mean float64) {
	if slices.Equal(preferred, s.engine.Preferred()) {
		return
	}
	s.engine.SetPreferred(preferred)
	if len(preferred) > 0 {
		s.log.Info("above the replicas' mean: new clients are redirected to the less-loaded alternates",
			"allocations", own, "mean", fmt.Sprintf("%.1f", mean), "alternates", fmt.Sprint(preferred))
	} else {
		s.log.Info("no longer redirecting new clients for balance", "allocations", own)
	}
}

// healthPort is the port of cfg's health address, where the peers serve
// /status too (the replicas of a Gateway share their config's shape); 0
// when there is none.
func healthPort(cfg *config.Config) int {
	_, p, err := net.SplitHostPort(cfg.Admin.HealthAddress)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return 0
	}
	return n
}

// peerAllocations reads allocationCount from the /status of the ternd at
// ip:port.
func peerAllocations(client *http.Client, ip netip.Addr, port int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), balanceTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(port)) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var st struct {
		AllocationCount *int `json:"allocationCount"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, statusLimit)).Decode(&st); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	if st.AllocationCount == nil || *st.AllocationCount < 0 {
		return 0, fmt.Errorf("%s: no allocationCount", url)
	}
	return *st.AllocationCount, nil
}
