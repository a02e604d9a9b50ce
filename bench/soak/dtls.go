package soak

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// dtlsFlooder is issue 22's item 4: Config.DTLSRate datagrams a second to the TURN-DTLS
// listener, each from a new source address and port (127.8.x.y), half of them 14 bytes of
// garbage whose first byte is 22 (a DTLS handshake record, to a demultiplexer) and half a
// ClientHello without a cookie. Before the fix each created an association and its
// goroutines for 10 s (40,000 goroutines and +217 MB at 2,300 a second, and real handshakes
// shed); now the garbage is dropped, and the ClientHellos keep a bounded set of unverified
// associations (the oldest closed for a new one) that never displace a verified one. Measured: ternd's goroutines (go_goroutines) and RSS, and what the flood got back;
// legitimate DTLS allocations, each with a full handshake, must succeed meanwhile.
type dtlsFlooder struct {
	cfg    Config
	probes prober

	sent, answered, bytesSent, bytesAnswered atomic.Uint64
}

// The bound on ternd's extra goroutines during the flood. The garbage makes nothing; each
// cookieless ClientHello makes an unverified association (pion/dtls answers it with the
// HelloVerifyRequest), of which the listener keeps at most dtlsUnverifiedMax open and
// 2 × dtlsUnverifiedMax with goroutines (closed ones whose goroutines have not ended yet),
// each with dtlsPerUnverified goroutines (package dataplane/listener/dtls: unverifiedMax,
// TestUnverifiedCost). dtlsGoroutineSlack is room for the legitimate probes' handshakes and
// allocations and the runtime's own.
const (
	dtlsUnverifiedMax  = 256
	dtlsPerUnverified  = 4
	dtlsGoroutineSlack = 500
	dtlsGoroutineBound = 2*dtlsUnverifiedMax*dtlsPerUnverified + dtlsGoroutineSlack
)

func (f *dtlsFlooder) run(ctx context.Context) {
	f.probes.cfg = f.cfg
	if !f.cfg.DTLSServer.IsValid() || f.cfg.DTLSRate <= 0 {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.probes.run(ctx, 250*time.Millisecond, turnclient.DTLS) }()
	garbage := make([]byte, 14)
	garbage[0] = 22
	_, _ = rand.Read(garbage[1:])
	hello := clientHello()
	perTick := float64(f.cfg.DTLSRate) * floodTick.Seconds()
	tick := time.NewTicker(floodTick)
	defer tick.Stop()
	credit := 0.0
	for i := 0; ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		for credit += perTick; credit >= 1 && ctx.Err() == nil; credit-- {
			p := garbage
			if i%2 == 1 {
				p = hello
			}
			src := clientAddr(8, (i/2)%1000)
			i++
			wg.Add(1)
			go func() { defer wg.Done(); f.one(src, p) }()
		}
	}
	wg.Wait()
}

// one sends p from a new socket on src and counts what comes back within 300 ms.
func (f *dtlsFlooder) one(src netip.Addr, p []byte) {
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
	if err != nil {
		return
	}
	defer uc.Close()
	if _, err := uc.WriteToUDPAddrPort(p, f.cfg.DTLSServer); err != nil {
		return
	}
	f.sent.Add(1)
	f.bytesSent.Add(uint64(len(p)))
	_ = uc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 2048)
	for {
		n, err := uc.Read(buf)
		if err != nil {
			return
		}
		f.answered.Add(1)
		f.bytesAnswered.Add(uint64(n))
	}
}

// clientHello is a DTLS 1.2 ClientHello record without a cookie (RFC 6347 §4.2.1): what a
// client sends first, and what a server must answer without keeping state.
func clientHello() []byte {
	var body []byte
	body = append(body, 0xfe, 0xfd) // client_version DTLS 1.2
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	body = append(body, random...)
	body = append(body, 0)                                // session_id
	body = append(body, 0)                                // cookie: none
	body = append(body, 0, 4, 0xc0, 0x2b, 0xc0, 0x2f)     // cipher suites: ECDHE-ECDSA/RSA-AES128-GCM-SHA256
	body = append(body, 1, 0)                             // compression: null
	ext := []byte{0x00, 0x0a, 0, 4, 0, 2, 0x00, 0x17}     // supported_groups: secp256r1
	ext = append(ext, 0x00, 0x0b, 0, 2, 1, 0)             // ec_point_formats: uncompressed
	ext = append(ext, 0x00, 0x0d, 0, 4, 0, 2, 0x04, 0x03) // signature_algorithms: ecdsa_secp256r1_sha256
	ext = append(ext, 0x00, 0x17, 0, 0)                   // extended_master_secret
	body = binary.BigEndian.AppendUint16(body, uint16(len(ext)))
	body = append(body, ext...)

	hs := []byte{1} // client_hello
	hs = append(hs, byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
	hs = append(hs, 0, 0)    // message_seq
	hs = append(hs, 0, 0, 0) // fragment_offset
	hs = append(hs, byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
	hs = append(hs, body...)

	rec := []byte{22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, 0} // handshake, DTLS 1.0 record version, epoch 0, seq 0
	rec = binary.BigEndian.AppendUint16(rec, uint16(len(hs)))
	return append(rec, hs...)
}

func (f *dtlsFlooder) report(r *AttackResult) {
	sent := f.sent.Load()
	r.Figures = map[string]float64{"sent": float64(sent), "answered": float64(f.answered.Load()),
		"bytes_sent": float64(f.bytesSent.Load()), "bytes_answered": float64(f.bytesAnswered.Load()),
		"goroutines_base": r.BaseGoroutines, "goroutines_peak": r.PeakGoroutines}
	probes := f.probes.report(r)
	r.Summary = fmt.Sprintf("%d datagrams (half 14-byte garbage with first byte 22, half cookieless ClientHellos) from new source ports: %d answered (%d bytes for %d); ternd goroutines %.0f -> peak %.0f, RSS %.1f -> %.1f MB; %s",
		sent, f.answered.Load(), f.bytesAnswered.Load(), f.bytesSent.Load(), r.BaseGoroutines, r.PeakGoroutines,
		float64(r.BaseRSS)/1e6, float64(r.PeakRSS)/1e6, probes)
	if sent == 0 {
		r.failf("no DTLS datagram sent")
	}
	if f.cfg.MetricsURL != "" && r.BaseGoroutines == 0 {
		r.failf("ternd's go_goroutines was not scraped")
	}
	if grew := r.PeakGoroutines - r.BaseGoroutines; grew > dtlsGoroutineBound {
		r.failf("ternd started %.0f goroutines during the flood of %d datagrams (at most %d allowed: %d unverified associations with %d each, and %d): state is kept before the cookie exchange",
			grew, sent, dtlsGoroutineBound, 2*dtlsUnverifiedMax, dtlsPerUnverified, dtlsGoroutineSlack)
	}
}
