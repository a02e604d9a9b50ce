package soak

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/stun/v2"
)

// reflector is issue 22's item 10: unauthenticated Allocates, what a reflection attack sends
// with its victim's address, from 127.12.0.1, Config.ReflectRequests of each of three forms:
// pion/turn's first Allocate with REQUESTED-TRANSPORT and FINGERPRINT (36 bytes), one with
// REQUESTED-TRANSPORT only (28 bytes) and a bare 20-byte Allocate. It counts the bytes of the
// 401s. The goal is issue 22's: the answer to the 36-byte Allocate is at most twice its size
// (docs/security.md, "Unauthenticated responses", gives the others' ratios).
type reflector struct {
	cfg Config

	mu    sync.Mutex
	forms []reflectForm
}

type reflectForm struct {
	name                 string
	size                 int
	sent, answered       int
	bytesSent, bytesBack int
	largest              int
}

// reflectLimit is the most bytes answered per byte sent, for the 36-byte form.
const reflectLimit = 2.0

func (r *reflector) run(ctx context.Context) {
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 12, 0, 1}), 0)))
	if err != nil {
		return
	}
	defer uc.Close()
	server := net.UDPAddrFromAddrPort(r.cfg.Server)
	allocate := stun.NewType(stun.MethodAllocate, stun.ClassRequest)
	forms := []struct {
		name    string
		setters []stun.Setter
	}{
		{"Allocate with REQUESTED-TRANSPORT and FINGERPRINT (pion/turn's first)", []stun.Setter{stun.TransactionID, allocate, requestedUDP, stun.Fingerprint}},
		{"Allocate with REQUESTED-TRANSPORT", []stun.Setter{stun.TransactionID, allocate, requestedUDP}},
		{"bare Allocate", []stun.Setter{stun.TransactionID, allocate}},
	}
	buf := make([]byte, 1500)
	for _, f := range forms {
		rf := reflectForm{name: f.name}
		ids := map[[stun.TransactionIDSize]byte]bool{}
		for i := 0; i < r.cfg.ReflectRequests && ctx.Err() == nil; i++ {
			m, err := stun.Build(f.setters...)
			if err != nil {
				return
			}
			if _, err := uc.WriteToUDP(m.Raw, server); err != nil {
				continue
			}
			ids[m.TransactionID] = true
			rf.size = len(m.Raw)
			rf.sent++
			rf.bytesSent += len(m.Raw)
			if i%20 == 19 { // paced: 20 every 10 ms
				r.drain(uc, buf, ids, &rf, floodTick)
			}
		}
		r.drain(uc, buf, ids, &rf, 500*time.Millisecond)
		r.mu.Lock()
		r.forms = append(r.forms, rf)
		r.mu.Unlock()
	}
}

// drain counts the answers to ids that come within d.
func (r *reflector) drain(uc *net.UDPConn, buf []byte, ids map[[stun.TransactionIDSize]byte]bool, rf *reflectForm, d time.Duration) {
	_ = uc.SetReadDeadline(time.Now().Add(d))
	for {
		m, err := readSTUN(uc, buf)
		if err != nil {
			return
		}
		if !ids[m.TransactionID] {
			continue
		}
		delete(ids, m.TransactionID)
		rf.answered++
		rf.bytesBack += len(m.Raw)
		rf.largest = max(rf.largest, len(m.Raw))
	}
}

// timeLimit: the attack is bounded by its count of requests (about a second), not by the
// attack time.
func (r *reflector) timeLimit(d time.Duration) time.Duration { return max(6*d, time.Minute) }

func (r *reflector) report(res *AttackResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Figures = map[string]float64{}
	s := ""
	for i, f := range r.forms {
		ratio := 0.0
		if f.bytesSent > 0 {
			ratio = float64(f.bytesBack) / float64(f.bytesSent)
		}
		res.Figures[fmt.Sprintf("ratio_%d_bytes", f.size)] = ratio
		res.Figures[fmt.Sprintf("largest_answer_%d_bytes", f.size)] = float64(f.largest)
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s (%d bytes): %d sent, %d answered, %d bytes back for %d (%.2f×, largest answer %d bytes)",
			f.name, f.size, f.sent, f.answered, f.bytesBack, f.bytesSent, ratio, f.largest)
		if i == 0 {
			if f.answered == 0 {
				res.failf("no answer to %s", f.name)
			}
			if ratio > reflectLimit || float64(f.largest) > reflectLimit*float64(f.size) {
				res.failf("%s: %.2f× bytes back, largest answer %d bytes; want at most %.0f× its %d bytes", f.name, ratio, f.largest, reflectLimit, f.size)
			}
		}
	}
	if len(r.forms) < 3 {
		res.failf("only %d of the 3 request forms were sent", len(r.forms))
	}
	res.Summary = "unauthenticated Allocates: " + s
}
