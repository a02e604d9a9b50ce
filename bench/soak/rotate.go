package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/stun/v2"
)

// rotator is issue 22's item 8: Config.RotateAddrs source addresses (127.10.x.y), each of
// which fetches a nonce of its own and sends Config.RotateGuesses Allocates signed with a
// wrong password for the valid username at once. The per-address bucket alone answers 10 of
// each address's guesses (250 addresses got 13 answers each before); with the per-username
// budget (10× the per-address burst and rate) the answers to all of them are at most
// rotateUserBurst + rotateUserRate × t + one per fresh address (docs/security.md, "Failure
// budgets per username and in total").
type rotator struct {
	cfg Config

	mu       sync.Mutex
	sent     int
	answered map[int]int
	noNonce  int
	elapsed  time.Duration
}

// The default per-username failure budget: 10× limits.authFailureBurst and .authFailureRate.
const (
	rotateUserBurst = 100
	rotateUserRate  = 20
)

func (r *rotator) run(ctx context.Context) {
	r.answered = map[int]int{}
	start := time.Now()
	defer func() { r.elapsed = time.Since(start) }()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range r.cfg.RotateAddrs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() { defer func() { <-sem; wg.Done() }(); r.guess(clientAddr(10, i)) }()
	}
	wg.Wait()
}

// guess fetches a nonce for src and sends the wrong-password guesses under it, then counts
// the answers that come within 500 ms.
func (r *rotator) guess(src netip.Addr) {
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
	if err != nil {
		return
	}
	defer uc.Close()
	server := net.UDPAddrFromAddrPort(r.cfg.Server)
	fetch, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest), requestedUDP)
	if err != nil {
		return
	}
	buf := make([]byte, 1500)
	var realm, nonce string
	for try := 0; try < 3 && nonce == ""; try++ {
		if _, err := uc.WriteToUDP(fetch.Raw, server); err != nil {
			return
		}
		_ = uc.SetReadDeadline(time.Now().Add(time.Second))
		for nonce == "" {
			m, err := readSTUN(uc, buf)
			if err != nil {
				break
			}
			var rl stun.Realm
			var nc stun.Nonce
			if m.TransactionID == fetch.TransactionID && rl.GetFrom(m) == nil && nc.GetFrom(m) == nil {
				realm, nonce = rl.String(), nc.String()
			}
		}
	}
	if nonce == "" {
		r.mu.Lock()
		r.noNonce++
		r.mu.Unlock()
		return
	}
	ids := map[[stun.TransactionIDSize]byte]bool{}
	for range r.cfg.RotateGuesses {
		m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest), requestedUDP,
			stun.NewUsername(r.cfg.Creds.Username), stun.NewRealm(realm), stun.NewNonce(nonce),
			stun.NewLongTermIntegrity(r.cfg.Creds.Username, realm, r.cfg.Creds.Password+"-wrong"), stun.Fingerprint)
		if err != nil {
			return
		}
		if _, err := uc.WriteToUDP(m.Raw, server); err == nil {
			ids[m.TransactionID] = true
			r.mu.Lock()
			r.sent++
			r.mu.Unlock()
		}
	}
	_ = uc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		m, err := readSTUN(uc, buf)
		if err != nil {
			return
		}
		if !ids[m.TransactionID] {
			continue
		}
		delete(ids, m.TransactionID)
		code := errorCode(m)
		r.mu.Lock()
		r.answered[code]++
		r.mu.Unlock()
	}
}

// errorCode is m's ERROR-CODE as a number, 0 for a success response.
func errorCode(m *stun.Message) int {
	var ec stun.ErrorCodeAttribute
	if ec.GetFrom(m) != nil {
		return 0
	}
	return int(ec.Code)
}

// readSTUN reads datagrams from uc until one decodes as STUN, or an error (a deadline,
// or uc closed).
func readSTUN(uc *net.UDPConn, buf []byte) (*stun.Message, error) {
	for {
		n, err := uc.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, err
			}
			continue
		}
		m := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
		if m.Decode() == nil {
			return m, nil
		}
	}
}

// timeLimit: the attack is bounded by its addresses and guesses (a few seconds), not by
// the attack time.
func (r *rotator) timeLimit(d time.Duration) time.Duration { return max(6*d, time.Minute) }

// bound is the most answers the per-username budget allows over the attack.
func (r *rotator) bound() int {
	return rotateUserBurst + int(rotateUserRate*r.elapsed.Seconds()+0.999) + r.cfg.RotateAddrs
}

func (r *rotator) report(res *AttackResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	answered := 0
	for _, n := range r.answered {
		answered += n
	}
	perAddr := r.cfg.RotateAddrs * min(r.cfg.RotateGuesses, 10)
	res.Figures = map[string]float64{"addresses": float64(r.cfg.RotateAddrs), "guesses": float64(r.sent),
		"answered": float64(answered), "bound": float64(r.bound()), "per_address_buckets_alone": float64(perAddr),
		"no_nonce": float64(r.noNonce), "seconds": r.elapsed.Seconds()}
	res.Summary = fmt.Sprintf("%d addresses × %d wrong-password guesses at one username in %.1f s: %d sent, %d answered (%s), %d dropped; bound 100 + 20/s × t + one per address = %d (the per-address buckets alone: %d)",
		r.cfg.RotateAddrs, r.cfg.RotateGuesses, r.elapsed.Seconds(), r.sent, answered, countMap(r.answered), r.sent-answered, r.bound(), perAddr)
	if r.sent == 0 {
		res.failf("no guess sent (%d addresses got no nonce)", r.noNonce)
	}
	if answered > r.bound() {
		res.failf("%d guesses answered, more than the per-username budget's %d", answered, r.bound())
	}
}
