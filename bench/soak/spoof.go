package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/turnclient"
)

// spoofer is issue 22's item 1: packets forged with a victim's source address, signed with a
// wrong password under nonces that were not issued to the victim (the attacker's own, a
// made-up one, a malformed one, an empty one), 12 at once and then Config.SpoofRate a second,
// while the victim refreshes its UDP allocation, creates permissions on its TCP allocation and
// allocates anew from its address. Before the fix each forged packet took a token from the
// victim's address and its requests were dropped as throttled; every one of them must
// succeed. The forged packets really come from the victim's IP (another port: the throttle
// is per IP), which is what a spoofer on the path achieves.
type spoofer struct {
	cfg Config

	sent     atomic.Uint64
	mu       sync.Mutex
	answered map[int]uint64
	ops      map[string]*[2]int // kind -> {ok, failed}
	errs     []string
}

var (
	victimIP  = clientAddr(5, 0)                       // 127.5.0.1
	spoofOwn  = netip.AddrFrom4([4]byte{127, 5, 1, 1}) // the attacker's own address
	madeUp    = "AAAAAAAAAAAA"                         // nonce-shaped, never issued
	malformed = "not-a-nonce"                          // not even nonce-shaped
)

func (sp *spoofer) run(ctx context.Context) {
	sp.answered = map[int]uint64{}
	sp.ops = map[string]*[2]int{"refresh": {}, "tcp-permission": {}, "allocate": {}}
	if !sp.cfg.TCPServer.IsValid() {
		sp.note("setup", errors.New("no TCP server"))
		return
	}
	// The victim: a UDP and a TCP allocation from 127.5.0.1.
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(victimIP, 0)))
	if err != nil {
		sp.note("setup", err)
		return
	}
	defer uc.Close()
	udp := turnclient.New(uc, sp.cfg.Server, sp.cfg.Creds)
	if _, err := udp.Allocate(0); err != nil {
		sp.note("setup", err)
		return
	}
	defer func() { _ = udp.Refresh(0) }()
	tr, err := turnclient.Dial(turnclient.TCP, netip.AddrPortFrom(victimIP, 0), sp.cfg.TCPServer, 5*time.Second)
	if err != nil {
		sp.note("setup", err)
		return
	}
	defer tr.Close()
	tcp := turnclient.NewOver(tr, sp.cfg.Creds)
	if _, err := tcp.Allocate(0); err != nil {
		sp.note("setup", err)
		return
	}
	defer func() { _ = tcp.Refresh(0) }()

	// The attacker's own nonce, from its own address (its wrong password fails there).
	own := ""
	if oc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(spoofOwn, 0))); err == nil {
		c := turnclient.New(oc, sp.cfg.Server, turnclient.Credentials{Username: sp.cfg.Creds.Username, Password: "wrong"})
		_, _ = c.Allocate(0)
		own = c.Nonce()
		oc.Close()
	}
	nonces := []string{madeUp, malformed, ""}
	if own != "" {
		nonces = append(nonces, own)
	}

	forger, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(victimIP, 0)))
	if err != nil {
		sp.note("setup", err)
		return
	}
	readDone := make(chan struct{})
	go func() { defer close(readDone); sp.read(forger) }()
	defer func() { time.Sleep(300 * time.Millisecond); forger.Close(); <-readDone }()
	server := net.UDPAddrFromAddrPort(sp.cfg.Server)
	realm := udp.Realm()
	forged := 0
	forge := func(n int) {
		for range n {
			nonce := nonces[forged%len(nonces)]
			forged++
			m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodRefresh, stun.ClassRequest),
				stun.RawAttribute{Type: stun.AttrLifetime, Value: []byte{0, 0, 2, 0x58}},
				stun.NewUsername(sp.cfg.Creds.Username), stun.NewRealm(realm), stun.NewNonce(nonce),
				stun.NewLongTermIntegrity(sp.cfg.Creds.Username, realm, "wrong"), stun.Fingerprint)
			if err != nil {
				return
			}
			if _, err := forger.WriteToUDP(m.Raw, server); err == nil {
				sp.sent.Add(1)
			}
		}
	}
	forge(12)
	stopForging := make(chan struct{})
	forgerDone := make(chan struct{})
	go func() {
		defer close(forgerDone)
		rate := max(sp.cfg.SpoofRate, 1)
		perTick := float64(rate) * floodTick.Seconds()
		tick := time.NewTicker(floodTick)
		defer tick.Stop()
		credit := 0.0
		for {
			select {
			case <-stopForging:
				return
			case <-tick.C:
			}
			for credit += perTick; credit >= 1; credit-- {
				forge(1)
			}
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		sp.op("refresh", udp.Refresh(600))
		sp.op("tcp-permission", tcp.CreatePermission(sp.cfg.Peer))
		// A new allocation from the victim's address, under the nonce the victim holds
		// (a nonce is per address), then released.
		if nc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(victimIP, 0))); err == nil {
			c := turnclient.New(nc, sp.cfg.Server, sp.cfg.Creds)
			c.SetAuth(udp.Realm(), udp.Nonce())
			_, err := c.Allocate(0)
			sp.op("allocate", err)
			if err == nil {
				_ = c.Refresh(0)
			}
			nc.Close()
		}
		sleep(ctx, 200*time.Millisecond)
	}
	close(stopForging)
	<-forgerDone
}

func (sp *spoofer) op(kind string, err error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err == nil {
		sp.ops[kind][0]++
		return
	}
	sp.ops[kind][1]++
	if len(sp.errs) < 5 {
		sp.errs = append(sp.errs, fmt.Sprintf("%s: %v", kind, err))
	}
}

func (sp *spoofer) note(kind string, err error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.errs) < 5 {
		sp.errs = append(sp.errs, fmt.Sprintf("%s: %v", kind, err))
	}
}

// read counts the answers to the forged packets by error code.
func (sp *spoofer) read(uc *net.UDPConn) {
	buf := make([]byte, 1500)
	for {
		m, err := readSTUN(uc, buf)
		if err != nil {
			return
		}
		code := errorCode(m)
		sp.mu.Lock()
		sp.answered[code]++
		sp.mu.Unlock()
	}
}

func (sp *spoofer) report(r *AttackResult) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	r.Figures = map[string]float64{"forged_sent": float64(sp.sent.Load())}
	for code, n := range sp.answered {
		r.Figures[fmt.Sprintf("forged_answered_%d", code)] = float64(n)
	}
	total, failed := 0, 0
	for kind, c := range sp.ops {
		r.Figures["victim_"+kind+"_ok"] = float64(c[0])
		r.Figures["victim_"+kind+"_failed"] = float64(c[1])
		total += c[0] + c[1]
		failed += c[1]
		if c[0]+c[1] == 0 {
			r.failf("the victim made no %s", kind)
		}
	}
	r.Summary = fmt.Sprintf("%d forged packets from the victim's address (answered: %s); victim's signed Refreshes %d/%d, TCP CreatePermissions %d/%d, new Allocates %d/%d succeeded",
		sp.sent.Load(), countMap(sp.answered), sp.ops["refresh"][0], sp.ops["refresh"][0]+sp.ops["refresh"][1],
		sp.ops["tcp-permission"][0], sp.ops["tcp-permission"][0]+sp.ops["tcp-permission"][1],
		sp.ops["allocate"][0], sp.ops["allocate"][0]+sp.ops["allocate"][1])
	if failed > 0 || len(sp.errs) > 0 {
		r.failf("victim locked out: %d of its %d requests failed (first: %v)", failed, total, sp.errs)
	}
	if sp.sent.Load() == 0 {
		r.failf("no forged packet sent")
	}
}
