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

// metadataPeers are the cloud metadata and wire-server addresses of issue 22's item 6 (the
// six it found open under a cluster of 0.0.0.0/0 and ::/0, and 169.254.169.254 itself).
var metadataPeers = []netip.AddrPort{
	netip.MustParseAddrPort("[fd00:ec2::254]:80"),      // AWS IMDS over IPv6
	netip.MustParseAddrPort("[64:ff9b::a9fe:a9fe]:80"), // NAT64 of 169.254.169.254
	netip.MustParseAddrPort("[2002:a9fe:a9fe::1]:80"),  // 6to4 of 169.254.169.254
	netip.MustParseAddrPort("100.100.100.200:80"),      // Alibaba Cloud
	netip.MustParseAddrPort("168.63.129.16:80"),        // Azure WireServer
	netip.MustParseAddrPort("192.0.0.192:80"),          // Oracle Cloud
	netip.MustParseAddrPort("169.254.169.254:80"),      // AWS, GCP, Azure IMDS, ...
}

// metadataControls are documentation addresses (RFC 5737, RFC 3849) the wide cluster does
// open: their permissions succeed, which shows that the refusals above are the protected
// ranges' and not the cluster's. No packet is sent to any of these addresses.
var metadataControls = []netip.AddrPort{
	netip.MustParseAddrPort("198.51.100.1:80"),
	netip.MustParseAddrPort("[2001:db8::1]:80"),
}

// metadataProber is issue 22's item 6: with an allocation of each family on the wide
// listener (clusters 0.0.0.0/0, ::/0 and 127.0.0.0/8), CreatePermission to every metadata
// address, metadataRounds times: each must get 403.
type metadataProber struct {
	cfg Config

	mu       sync.Mutex
	codes    map[string]map[int]int // peer -> code (0 success) -> count
	controls map[int]int
	errs     []string
}

const metadataRounds = 5

func (m *metadataProber) run(ctx context.Context) {
	m.codes, m.controls = map[string]map[int]int{}, map[int]int{}
	if !m.cfg.WideServer.IsValid() {
		return
	}
	src := netip.AddrFrom4([4]byte{127, 11, 0, 1})
	clients := map[bool]*turnclient.Client{}
	for _, v6 := range []bool{false, true} {
		uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
		if err != nil {
			m.note(err)
			return
		}
		defer uc.Close()
		c := turnclient.New(uc, m.cfg.WideServer, m.cfg.Creds)
		if _, err := c.AllocateWith(0, turnclient.RequestedFamily(v6)); err != nil {
			m.note(fmt.Errorf("allocate (IPv6 %v): %w", v6, err))
			return
		}
		defer func() { _ = c.Refresh(0) }()
		clients[v6] = c
	}
	for range metadataRounds {
		if ctx.Err() != nil {
			return
		}
		for _, p := range append(append([]netip.AddrPort(nil), metadataPeers...), metadataControls...) {
			code := errCode(clients[p.Addr().Is6()].CreatePermission(p), m.note)
			m.mu.Lock()
			if isControl(p) {
				m.controls[code]++
			} else {
				if m.codes[p.Addr().String()] == nil {
					m.codes[p.Addr().String()] = map[int]int{}
				}
				m.codes[p.Addr().String()][code]++
			}
			m.mu.Unlock()
		}
	}
}

func isControl(p netip.AddrPort) bool {
	for _, c := range metadataControls {
		if c == p {
			return true
		}
	}
	return false
}

// errCode is the TURN error code of err, 0 for nil and -1 for no answer or another error,
// which it passes to note.
func errCode(err error, note func(error)) int {
	if err == nil {
		return 0
	}
	var er *turnclient.ErrorResponse
	if errors.As(err, &er) {
		return int(er.Code)
	}
	note(err)
	return -1
}

func (m *metadataProber) note(err error) {
	m.mu.Lock()
	if len(m.errs) < 5 {
		m.errs = append(m.errs, err.Error())
	}
	m.mu.Unlock()
}

// timeLimit: the attack is a fixed count of requests, not bounded by the attack time.
func (m *metadataProber) timeLimit(d time.Duration) time.Duration { return max(6*d, time.Minute) }

func (m *metadataProber) report(r *AttackResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Figures = map[string]float64{}
	refused, tried := 0, 0
	for _, p := range metadataPeers {
		codes := m.codes[p.Addr().String()]
		for code, n := range codes {
			r.Figures[fmt.Sprintf("%s_%d", p.Addr(), code)] = float64(n)
			tried += n
			if code == 403 {
				refused += n
			} else {
				r.failf("CreatePermission to %v: %s, want 403 every time", p.Addr(), countMap(codes))
			}
		}
		if len(codes) == 0 {
			r.failf("CreatePermission to %v was never tried (errors: %v)", p.Addr(), m.errs)
		}
	}
	r.Summary = fmt.Sprintf("CreatePermission to %d metadata addresses under clusters 0.0.0.0/0 and ::/0, %d rounds: %d of %d refused with 403; documentation addresses under the same clusters: %s",
		len(metadataPeers), metadataRounds, refused, tried, countMap(m.controls))
	if m.controls[0] == 0 {
		r.failf("the control permissions to documentation addresses did not succeed (%s): the wide cluster is not in place", countMap(m.controls))
	}
}
