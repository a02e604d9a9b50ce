package soak

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/stun/v2"
)

// FloodResult is what a wrong-password flood from one address got back.
type FloodResult struct {
	// Sent is the signed Allocate requests with a wrong password.
	Sent uint64 `json:"sent"`
	// Answered counts the answers to them by error code (401 Unauthorized, 438 Stale
	// Nonce, ...); the 401s to the unsigned requests that fetch nonces are not counted.
	Answered map[int]uint64 `json:"answered"`
	// Nonces is how many times the flood fetched a nonce with an unsigned request (at the
	// start, and after a 438).
	Nonces int `json:"nonces"`
}

// flooder sends Allocate requests signed with a wrong password, with a valid nonce, at
// Config.FloodRate from one address, and counts what comes back.
type flooder struct {
	cfg      Config
	sent     atomic.Uint64
	mu       sync.Mutex
	answered map[int]uint64
	nonces   int
	realm    string
	nonce    string
	fetchTID [stun.TransactionIDSize]byte
}

// floodTick is how often the flood sends its next batch: rate × floodTick requests at once.
const floodTick = 10 * time.Millisecond

func (f *flooder) run(ctx context.Context) {
	f.answered = map[int]uint64{}
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(clientAddr(3, 0), 0)))
	if err != nil {
		return
	}
	defer uc.Close()
	server := net.UDPAddrFromAddrPort(f.cfg.Server)
	done := make(chan struct{})
	go func() { defer close(done); f.read(uc) }()
	if !f.fetchNonce(ctx, uc, server) {
		uc.Close()
		<-done
		return
	}
	perTick := float64(f.cfg.FloodRate) * floodTick.Seconds()
	tick := time.NewTicker(floodTick)
	defer tick.Stop()
	credit := 0.0
	for {
		select {
		case <-ctx.Done():
			time.Sleep(500 * time.Millisecond) // the last answers
			uc.Close()
			<-done
			return
		case <-tick.C:
		}
		f.mu.Lock()
		realm, nonce := f.realm, f.nonce
		f.mu.Unlock()
		if nonce == "" { // a 438 came: an unsigned request fetches a fresh one
			f.fetchNonce(ctx, uc, server)
			continue
		}
		credit += perTick
		for ; credit >= 1; credit-- {
			m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
				requestedUDP, stun.NewUsername(f.cfg.Creds.Username), stun.NewRealm(realm), stun.NewNonce(nonce),
				stun.NewLongTermIntegrity(f.cfg.Creds.Username, realm, f.cfg.Creds.Password+"-wrong"), stun.Fingerprint)
			if err != nil {
				return
			}
			if _, err := uc.WriteToUDP(m.Raw, server); err == nil {
				f.sent.Add(1)
			}
		}
	}
}

// requestedUDP is REQUESTED-TRANSPORT UDP (RFC 8656 §18.10).
var requestedUDP = stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}}

// fetchNonce sends an unsigned Allocate, which is never throttled, and waits up to a second
// for read to store the REALM and NONCE of its 401.
func (f *flooder) fetchNonce(ctx context.Context, uc *net.UDPConn, server *net.UDPAddr) bool {
	m, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest), requestedUDP)
	if err != nil {
		return false
	}
	f.mu.Lock()
	f.nonces++
	f.fetchTID = m.TransactionID
	f.mu.Unlock()
	for range 10 {
		if _, err := uc.WriteToUDP(m.Raw, server); err != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
		f.mu.Lock()
		ok := f.nonce != ""
		f.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// read counts the answers by code until uc closes, keeping REALM and NONCE of a 401 and
// dropping the nonce on a 438 so the sender fetches a new one.
func (f *flooder) read(uc *net.UDPConn) {
	buf := make([]byte, 1500)
	for {
		m, err := readSTUN(uc, buf)
		if err != nil {
			return
		}
		code := errorCode(m)
		var realm stun.Realm
		var nonce stun.Nonce
		f.mu.Lock()
		if m.TransactionID == f.fetchTID {
			// The unsigned request's 401: not part of the flood's count.
			if realm.GetFrom(m) == nil && nonce.GetFrom(m) == nil {
				f.realm, f.nonce = realm.String(), nonce.String()
			}
		} else {
			f.answered[code]++
			if code == int(stun.CodeStaleNonce) {
				f.nonce = ""
			}
		}
		f.mu.Unlock()
	}
}

func (f *flooder) progress() (sent, answered uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.answered {
		answered += n
	}
	return f.sent.Load(), answered
}

func (f *flooder) result() FloodResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := FloodResult{Sent: f.sent.Load(), Answered: map[int]uint64{}, Nonces: f.nonces}
	for k, v := range f.answered {
		r.Answered[k] = v
	}
	return r
}
