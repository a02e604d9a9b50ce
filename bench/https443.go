package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/tern-gw/tern/bench/procstat"
	"github.com/tern-gw/tern/bench/stats"
)

// HTTPSName is the SNI the HTTPS client of MeasureHTTPS sends: a name that is
// not a TURN server name, so a TURN-TLS listener that shares its port with
// HTTPS splices the connection to its upstream.
const HTTPSName = "www.ternbench.test"

// SmallBody is the size of the response each new connection of
// MeasureHTTPS fetches, bytes.
const SmallBody = 1024

// HTTPS443Result is HTTPS over one path to an upstream HTTPS server (issue
// 23: TURN-TLS and HTTPS on one port): straight to the upstream ("direct")
// or through a TURN-TLS listener that splices it there (the target's name).
type HTTPS443Result struct {
	Path   string `json:"path"`
	Repeat int    `json:"repeat"`
	// Conns is new connections opened one after another, each a TCP and
	// TLS handshake (ALPN h2) and one HTTP/2 GET of SmallBody bytes; Errors
	// is those that failed or did not speak HTTP/2.
	Conns  int `json:"conns"`
	Errors int `json:"errors"`
	// ConnP50 and ConnP99 are the time from dial to the whole response, µs.
	ConnP50 float64 `json:"conn_p50_us"`
	ConnP99 float64 `json:"conn_p99_us"`
	// ConnsPerSec is Conns over the time they took.
	ConnsPerSec float64 `json:"conns_per_sec"`
	// DownloadBytes is one HTTP/2 response read on one connection, bytes,
	// at DownloadMBps (10⁶ bytes/s).
	DownloadBytes int64   `json:"download_bytes"`
	DownloadMBps  float64 `json:"download_mbps"`
	// ServerCPUPerConn (µs) and ServerCPUPerMB (ms per 10⁶ bytes) are the
	// splicing server's process CPU over the connections and over the
	// download; zero for the direct path.
	ServerCPUPerConn float64 `json:"server_cpu_per_conn_us,omitempty"`
	ServerCPUPerMB   float64 `json:"server_cpu_per_mb_ms,omitempty"`
}

// HTTPSUpstream is an HTTPS server on loopback for MeasureHTTPS: HTTP/2 and
// HTTP/1.1 over TLS, GET /small answering SmallBody bytes and GET
// /bytes?n=N answering N.
type HTTPSUpstream struct {
	srv *http.Server
	ln  net.Listener
}

// StartHTTPSUpstream serves on addr (port 0 picks one) with the PEM
// certificate and key at certFile and keyFile. It returns the errors of
// loading the pair and of listening.
func StartHTTPSUpstream(addr netip.AddrPort, certFile, keyFile string) (*HTTPSUpstream, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, err
	}
	small := make([]byte, SmallBody)
	chunk := make([]byte, 64<<10)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /small", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(small) })
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n: want a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, int64(len(chunk)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	u := &HTTPSUpstream{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}}}}
	go func() { _ = u.srv.ServeTLS(ln, "", "") }()
	return u, nil
}

// Addr is where the upstream listens.
func (u *HTTPSUpstream) Addr() netip.AddrPort {
	return u.ln.Addr().(*net.TCPAddr).AddrPort()
}

// Close stops the upstream.
func (u *HTTPSUpstream) Close() { _ = u.srv.Close() }

// HTTPSLoad is what MeasureHTTPS does on each path.
type HTTPSLoad struct {
	// Conns new connections, one after another.
	Conns int
	// Download bytes in one response.
	Download int64
}

// MeasureHTTPS fetches, through addr (the upstream itself, or a TURN-TLS
// listener that splices to it), load.Conns times SmallBody on a new
// connection each and then load.Download bytes on one connection, every
// request with SNI HTTPSName and ALPN h2. serverPID, when not 0, is the
// process whose CPU the result charges per connection and per MB. It
// returns an error when the download fails or is not HTTP/2; the small
// requests' failures are counted in Errors.
func MeasureHTTPS(ctx context.Context, path string, addr netip.AddrPort, serverPID int, load HTTPSLoad) (HTTPS443Result, error) {
	res := HTTPS443Result{Path: path, Conns: load.Conns, DownloadBytes: load.Download}
	cpu := func() time.Duration {
		if serverPID == 0 {
			return 0
		}
		d, _ := procstat.CPU(serverPID)
		return d
	}
	lat := make([]int64, 0, load.Conns)
	c0, t0 := cpu(), time.Now()
	for range load.Conns {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		start := time.Now()
		if _, err := fetch(ctx, addr, "/small"); err != nil {
			res.Errors++
			continue
		}
		lat = append(lat, time.Since(start).Microseconds())
	}
	el, c1 := time.Since(t0), cpu()
	if n := len(lat); n > 0 {
		slices.Sort(lat)
		res.ConnP50 = float64(stats.Percentile(lat, 50))
		res.ConnP99 = float64(stats.Percentile(lat, 99))
		res.ConnsPerSec = float64(n) / el.Seconds()
		if serverPID != 0 {
			res.ServerCPUPerConn = float64((c1 - c0).Microseconds()) / float64(n)
		}
	}
	c0, t0 = cpu(), time.Now()
	n, err := fetch(ctx, addr, "/bytes?n="+strconv.FormatInt(load.Download, 10))
	el, c1 = time.Since(t0), cpu()
	if err != nil {
		return res, fmt.Errorf("%s: download: %w", path, err)
	}
	if n != load.Download {
		return res, fmt.Errorf("%s: download: %d bytes, want %d", path, n, load.Download)
	}
	res.DownloadMBps = float64(n) / 1e6 / el.Seconds()
	if serverPID != 0 && n > 0 {
		res.ServerCPUPerMB = float64((c1 - c0).Microseconds()) / 1e3 / (float64(n) / 1e6)
	}
	return res, nil
}

// errNotH2 is a response that came back over HTTP/1: the ALPN did not
// reach the upstream untouched.
var errNotH2 = errors.New("response not over HTTP/2")

// fetch GETs target over a new TLS connection to addr and returns the body's
// length, bytes.
func fetch(ctx context.Context, addr netip.AddrPort, target string) (int64, error) {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: HTTPSName, InsecureSkipVerify: true}, //nolint:gosec // the bench's own self-signed upstream
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr.String())
		},
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+HTTPSName+target, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, err
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("status %s", resp.Status)
	}
	if resp.ProtoMajor != 2 {
		return n, errNotH2
	}
	return n, nil
}
