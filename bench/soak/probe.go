package soak

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// prober makes legitimate allocations over TCP, TLS or DTLS during an attack, one after
// another from 127.13.0.x, each on a new connection (a new handshake), released at once: the
// attacks on connections and handshakes must not keep a client out.
type prober struct {
	cfg  Config
	mu   sync.Mutex
	ok   map[turnclient.Proto]int
	fail map[turnclient.Proto]int
	errs []string
}

// probeAddr is the legitimate prober's source address of each transport.
var probeAddr = map[turnclient.Proto]netip.Addr{
	turnclient.TCP:  netip.AddrFrom4([4]byte{127, 13, 0, 1}),
	turnclient.TLS:  netip.AddrFrom4([4]byte{127, 13, 0, 2}),
	turnclient.DTLS: netip.AddrFrom4([4]byte{127, 13, 0, 3}),
}

// run allocates over each of protos whose server is set, every interval, until ctx ends.
func (p *prober) run(ctx context.Context, interval time.Duration, protos ...turnclient.Proto) {
	p.mu.Lock()
	p.ok, p.fail = map[turnclient.Proto]int{}, map[turnclient.Proto]int{}
	p.mu.Unlock()
	for ctx.Err() == nil {
		for _, proto := range protos {
			server := p.server(proto)
			if !server.IsValid() {
				continue
			}
			err := p.once(proto, server)
			p.mu.Lock()
			if err == nil {
				p.ok[proto]++
			} else {
				p.fail[proto]++
				if len(p.errs) < 5 {
					p.errs = append(p.errs, fmt.Sprintf("%s: %v", proto, err))
				}
			}
			p.mu.Unlock()
		}
		sleep(ctx, interval)
	}
}

func (p *prober) server(proto turnclient.Proto) netip.AddrPort {
	switch proto {
	case turnclient.TCP:
		return p.cfg.TCPServer
	case turnclient.TLS:
		return p.cfg.TLSServer
	case turnclient.DTLS:
		return p.cfg.DTLSServer
	}
	return p.cfg.Server
}

// once connects (with its handshake), allocates and releases the allocation.
func (p *prober) once(proto turnclient.Proto, server netip.AddrPort) error {
	tr, err := turnclient.Dial(proto, netip.AddrPortFrom(probeAddr[proto], 0), server, 10*time.Second)
	if err != nil {
		return err
	}
	defer tr.Close()
	c := turnclient.NewOver(tr, p.cfg.Creds)
	c.Timeout, c.Retries = 500*time.Millisecond, 5
	if _, err := c.Allocate(0); err != nil {
		return err
	}
	return c.Refresh(0)
}

// report adds the probes' counts to r and a failure if any failed or none was made.
func (p *prober) report(r *AttackResult) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ""
	for _, proto := range []turnclient.Proto{turnclient.TCP, turnclient.TLS, turnclient.DTLS} {
		ok, fail := p.ok[proto], p.fail[proto]
		if ok+fail == 0 {
			continue
		}
		if r.Figures == nil {
			r.Figures = map[string]float64{}
		}
		r.Figures["legit_"+string(proto)+"_allocations_ok"] = float64(ok)
		r.Figures["legit_"+string(proto)+"_allocations_failed"] = float64(fail)
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %d/%d", proto, ok, ok+fail)
	}
	if s == "" {
		r.failf("no legitimate allocation was tried during the attack")
		return "no legitimate allocation tried"
	}
	if len(p.errs) > 0 {
		r.failf("legitimate allocations failed under the attack (first: %v)", p.errs)
	}
	return "legitimate allocations on new connections succeeded: " + s
}
