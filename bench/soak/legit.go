package soak

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"
)

// LegitResult is what the legitimate clients saw.
type LegitResult struct {
	// Allocated is the clients whose Allocate succeeded; AllocFailed the others, with the
	// first few errors.
	Allocated   int      `json:"allocated"`
	AllocFailed int      `json:"alloc_failed"`
	AllocErrors []string `json:"alloc_errors,omitempty"`
	// AllocTime is how long allocating every client took (they allocate under attack).
	AllocTime time.Duration `json:"alloc_time_ns"`
	// Sent and Received are datagrams over every client; Loss is 1 - Received/Sent.
	Sent     uint64  `json:"sent"`
	Received uint64  `json:"received"`
	Loss     float64 `json:"loss"`
	// MaxClientLoss is the worst client's loss; ClientsOver1Pct the clients whose loss is 1%
	// or more; Silent the allocated clients that received nothing back.
	MaxClientLoss float64 `json:"max_client_loss"`
	// MinClientSent is the fewest datagrams an allocated client sent: below 100, one lost
	// datagram is already 1% of a client's.
	MinClientSent   uint64 `json:"min_client_sent"`
	ClientsOver1Pct int    `json:"clients_over_1pct"`
	Silent          int    `json:"silent"`
	// RTT percentiles of the round trip client -> server -> peer -> server -> client.
	RTTp50 time.Duration `json:"rtt_p50_ns"`
	RTTp99 time.Duration `json:"rtt_p99_ns"`
	RTTMax time.Duration `json:"rtt_max_ns"`
	// PionWarnings counts the warnings and errors pion/turn logged while relaying (how it
	// reports a failed Refresh, permission refresh or ChannelBind), with the first few;
	// PionWarningsAtClose those logged while the clients were closed at the end (a refresh
	// timer firing into a closed client says "transaction closed").
	PionWarnings        int      `json:"pion_warnings"`
	PionMessages        []string `json:"pion_messages,omitempty"`
	PionWarningsAtClose int      `json:"pion_warnings_at_close"`
}

// legitClient is one pion/turn client with its allocation.
type legitClient struct {
	id       uint32
	conn     net.PacketConn
	client   *turn.Client
	relay    net.PacketConn
	ready    atomic.Bool
	sent     atomic.Uint64
	received atomic.Uint64
}

// legit runs the legitimate clients.
type legit struct {
	cfg     Config
	start   time.Time
	clients []*legitClient
	log     *countingLogger
	rtt     histogram

	allocated, failed atomic.Int64
	mu                sync.Mutex
	errs              []string
	allocTime         time.Duration
	peer              net.Addr
	// allocDone is closed once every client has tried to allocate.
	allocDone chan struct{}
}

func newLegit(cfg Config, start time.Time) *legit {
	l := &legit{cfg: cfg, start: start, log: &countingLogger{}, allocDone: make(chan struct{})}
	l.peer = net.UDPAddrFromAddrPort(cfg.Peer)
	l.clients = make([]*legitClient, cfg.Allocations)
	for i := range l.clients {
		l.clients[i] = &legitClient{id: uint32(i)}
	}
	return l
}

// senders is the goroutines that pace the clients' datagrams; each takes every senders-th
// client and spreads its sends over the interval.
const senders = 8

func (l *legit) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() { defer wg.Done(); l.send(ctx, w) }()
	}
	l.allocateAll(ctx)
	<-ctx.Done()
	wg.Wait()
	// Echoes still on their way count: wait for them before the clients close.
	time.Sleep(2 * time.Second)
	l.log.closing.Store(true)
	l.closeAll()
}

// allocateAll allocates every client, 32 at a time, and starts each one's reader.
func (l *legit) allocateAll(ctx context.Context) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, c := range l.clients {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := l.allocate(c, i); err != nil {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.errs) < 5 {
					l.errs = append(l.errs, fmt.Sprintf("client %d: %v", i, err))
				}
				l.mu.Unlock()
				return
			}
			l.allocated.Add(1)
			go l.read(c)
			c.ready.Store(true)
		}()
	}
	wg.Wait()
	l.mu.Lock()
	l.allocTime = time.Since(l.start)
	l.mu.Unlock()
	close(l.allocDone)
}

func (l *legit) allocate(c *legitClient, i int) error {
	src := clientAddr(1, i/l.cfg.PerIP)
	conn, err := net.ListenPacket("udp4", net.JoinHostPort(src.String(), "0"))
	if err != nil {
		return err
	}
	server := l.cfg.Server.String()
	tc, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server,
		TURNServerAddr: server,
		Username:       l.cfg.Creds.Username,
		Password:       l.cfg.Creds.Password,
		Conn:           conn,
		LoggerFactory:  l.log,
	})
	if err != nil {
		conn.Close()
		return err
	}
	if err := tc.Listen(); err != nil {
		tc.Close()
		conn.Close()
		return err
	}
	relay, err := tc.Allocate()
	if err != nil {
		tc.Close()
		conn.Close()
		return err
	}
	c.conn, c.client, c.relay = conn, tc, relay
	return nil
}

// send paces the datagrams of clients w, w+senders, ...: each gets one per Interval, spread
// evenly, so the server sees a steady rate rather than bursts.
func (l *legit) send(ctx context.Context, w int) {
	var mine []*legitClient
	for i := w; i < len(l.clients); i += senders {
		mine = append(mine, l.clients[i])
	}
	if len(mine) == 0 {
		return
	}
	buf := make([]byte, l.cfg.Size)
	step := l.cfg.Interval / time.Duration(len(mine))
	next := time.Now().Add(time.Duration(w) * l.cfg.Interval / senders)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for seq := uint32(0); ; seq++ {
		for _, c := range mine {
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			} else if ctx.Err() != nil {
				return
			}
			next = next.Add(step)
			if !c.ready.Load() {
				continue
			}
			binary.BigEndian.PutUint32(buf, c.id)
			binary.BigEndian.PutUint32(buf[4:], seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(time.Since(l.start)))
			if _, err := c.relay.WriteTo(buf, l.peer); err == nil {
				c.sent.Add(1)
			}
		}
	}
}

// read counts the echoes of c's datagrams and their round-trip times until c closes.
func (l *legit) read(c *legitClient) {
	buf := make([]byte, 2048)
	for {
		n, _, err := c.relay.ReadFrom(buf)
		if err != nil {
			return
		}
		if n < 16 || binary.BigEndian.Uint32(buf) != c.id {
			continue
		}
		c.received.Add(1)
		sentAt := time.Duration(binary.BigEndian.Uint64(buf[8:]))
		l.rtt.add(time.Since(l.start) - sentAt)
	}
}

// closeAll releases every allocation (pion sends Refresh with LIFETIME 0) and socket.
func (l *legit) closeAll() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, c := range l.clients {
		if c.client == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = c.relay.Close()
			c.client.Close()
			_ = c.conn.Close()
		}()
	}
	wg.Wait()
}

func (l *legit) result() LegitResult {
	r := LegitResult{Allocated: int(l.allocated.Load()), AllocFailed: int(l.failed.Load())}
	l.mu.Lock()
	r.AllocErrors = slices.Clone(l.errs)
	r.AllocTime = l.allocTime
	l.mu.Unlock()
	for _, c := range l.clients {
		if !c.ready.Load() {
			continue
		}
		s, rcv := c.sent.Load(), c.received.Load()
		if r.MinClientSent == 0 || s < r.MinClientSent {
			r.MinClientSent = s
		}
		r.Sent += s
		r.Received += rcv
		if s == 0 {
			continue
		}
		if rcv == 0 {
			r.Silent++
		}
		loss := 1 - float64(min(rcv, s))/float64(s)
		r.MaxClientLoss = math.Max(r.MaxClientLoss, loss)
		if loss >= 0.01 {
			r.ClientsOver1Pct++
		}
	}
	if r.Sent > 0 {
		r.Loss = 1 - float64(min(r.Received, r.Sent))/float64(r.Sent)
	}
	r.RTTp50, r.RTTp99, r.RTTMax = l.rtt.quantile(0.5), l.rtt.quantile(0.99), l.rtt.max()
	r.PionWarnings, r.PionMessages, r.PionWarningsAtClose = l.log.counts()
	return r
}

// histogram counts durations in buckets of 1/8 of a power of two of microseconds (12.5%
// resolution), lock-free.
type histogram struct {
	buckets [64 * 8]atomic.Uint64
	top     atomic.Int64
}

func bucketOf(us float64) int {
	if us < 1 {
		return 0
	}
	b := int(math.Log2(us) * 8)
	return min(max(b, 0), 64*8-1)
}

func (h *histogram) add(d time.Duration) {
	h.buckets[bucketOf(float64(d.Microseconds()))].Add(1)
	for {
		t := h.top.Load()
		if int64(d) <= t || h.top.CompareAndSwap(t, int64(d)) {
			return
		}
	}
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= want {
			return time.Duration(math.Exp2(float64(i+1)/8)) * time.Microsecond
		}
	}
	return h.max()
}

func (h *histogram) max() time.Duration { return time.Duration(h.top.Load()) }

// countingLogger is a pion LoggerFactory that keeps only warnings and errors: pion reports a
// failed Refresh, permission refresh or ChannelBind that way and nowhere else.
type countingLogger struct {
	closing atomic.Bool
	mu      sync.Mutex
	n       int
	atClose int
	msgs    []string
}

func (l *countingLogger) NewLogger(string) logging.LeveledLogger { return l }

func (l *countingLogger) note(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing.Load() {
		l.atClose++
		return
	}
	l.n++
	if len(l.msgs) < 10 {
		l.msgs = append(l.msgs, msg)
	}
}

func (l *countingLogger) counts() (n int, msgs []string, atClose int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, slices.Clone(l.msgs), l.atClose
}

func (l *countingLogger) Trace(string)          {}
func (l *countingLogger) Tracef(string, ...any) {}
func (l *countingLogger) Debug(string)          {}
func (l *countingLogger) Debugf(string, ...any) {}
func (l *countingLogger) Info(string)           {}
func (l *countingLogger) Infof(string, ...any)  {}
func (l *countingLogger) Warn(m string)         { l.note("warning: " + m) }
func (l *countingLogger) Warnf(f string, a ...any) {
	l.note("warning: " + fmt.Sprintf(f, a...))
}
func (l *countingLogger) Error(m string) { l.note("error: " + m) }
func (l *countingLogger) Errorf(f string, a ...any) {
	l.note("error: " + fmt.Sprintf(f, a...))
}
