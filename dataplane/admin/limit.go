package admin

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Limits bound one endpoint's (one address's) HTTP server. The endpoints
// are not authenticated and may be reachable from the pod network, so
// whoever reaches them must not be able to hold connections, and with them
// the file descriptors that the TURN listeners need (issue 22, item 2:
// 19,976 idle keep-alive connections to /metrics once brought ternd to its
// descriptor limit, after which TCP and TLS allocations failed).
type Limits struct {
	// MaxConns is how many connections the endpoint holds at once; one
	// accepted past it is closed at once, so the endpoint never holds more
	// than MaxConns descriptors (plus the one being closed).
	MaxConns int
	// MaxConnsPerIP is how many of them one client IP holds (an IPv6
	// client: its /64), so that one address cannot take the whole
	// endpoint, and /live still answers the kubelet.
	MaxConnsPerIP int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are
	// net/http.Server's: how long a client may take to send the request
	// headers and the whole request, how long writing the response may
	// take, and how long a keep-alive connection may wait for its next
	// request.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
}

// DefaultLimits are the limits of the health and metrics endpoints: 64
// connections per endpoint, 8 per client address, 5 s for the request
// headers, 10 s for the request, 30 s to write the response, 30 s idle.
// A kubelet probes with one connection at a time and Prometheus scrapes a
// target with one, so 8 per address leaves room for both; the health,
// metrics and profiling endpoints together hold at most 192 descriptors
// (3 × 64) whatever their clients do, which leaves the rest of ternd's
// descriptor limit to the TURN listeners (see docs/security.md).
var DefaultLimits = Limits{
	MaxConns:          64,
	MaxConnsPerIP:     8,
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       10 * time.Second,
	WriteTimeout:      30 * time.Second,
	IdleTimeout:       30 * time.Second,
}

// pprofLimits are DefaultLimits with a write timeout long enough for a
// CPU profile or trace, which writes after its seconds parameter (default
// 30 s) have passed.
var pprofLimits = func() Limits {
	l := DefaultLimits
	l.WriteTimeout = 5 * time.Minute
	return l
}()

// limitListener is a net.Listener that holds at most max connections, and
// perIP per client IP: Accept closes a connection past either at once and
// accepts the next.
type limitListener struct {
	net.Listener
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[netip.Addr]int
	peak  int // the most connections held at once (read by tests)
}

func newLimitListener(ln net.Listener, l Limits) *limitListener {
	return &limitListener{Listener: ln, max: l.MaxConns, perIP: l.MaxConnsPerIP, byIP: map[netip.Addr]int{}}
}

// ipKey is what connections are counted by: the IP, an IPv6 one's /64.
func ipKey(a net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

// Accept returns the next connection within the limits.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := ipKey(c.RemoteAddr())
		l.mu.Lock()
		if (l.max > 0 && l.total >= l.max) || (l.perIP > 0 && l.byIP[key] >= l.perIP) {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.total++
		l.byIP[key]++
		l.peak = max(l.peak, l.total)
		l.mu.Unlock()
		return &limitConn{Conn: c, l: l, key: key}, nil
	}
}

func (l *limitListener) release(key netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[key]--; l.byIP[key] <= 0 {
		delete(l.byIP, key)
	}
}

// held returns how many connections are held, and the most held at once.
func (l *limitListener) held() (now, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.peak
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	key  netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
