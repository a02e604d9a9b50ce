package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/internal/selfsigned"
)

// runHTTPS443 measures HTTPS through a TURN-TLS listener that shares its
// port with it (ternd-443, issue 23) against HTTPS straight to the upstream,
// interleaved: new connections (handshake and a small GET each) and one
// large HTTP/2 download. The TURN-TLS side of the shared port is measured
// by `flows -launch ternd,ternd-443 -transport tls`.
func runHTTPS443(args []string) error {
	fs := flag.NewFlagSet("https443", flag.ContinueOnError)
	var c common
	c.register(fs)
	conns := fs.Int("conns", 300, "new connections per path and repeat, one after another (quick: 20)")
	download := fs.Int64("download", 64<<20, "bytes of the one large response per path and repeat (quick: 4 MiB)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := visited(fs)
	if c.quick {
		if !set["conns"] {
			*conns = 20
		}
		if !set["download"] {
			*download = 4 << 20
		}
	}
	if c.netns != "" {
		return errors.New("-netns: https443 runs on loopback only")
	}
	if c.launch == "" && len(c.targets) == 0 {
		c.launch = "ternd-443"
	}
	c.streams = true
	dir, err := os.MkdirTemp("", "ternbench-https443-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cert, key, err := selfsigned.Write(filepath.Join(dir, "upstream"), bench.HTTPSName, 24*time.Hour)
	if err != nil {
		return err
	}
	up, err := bench.StartHTTPSUpstream(netip.MustParseAddrPort("127.0.0.1:0"), cert, key)
	if err != nil {
		return err
	}
	defer up.Close()
	c.tlsUpstream = up.Addr().String()
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := signalContext()
	defer cancel()
	load := bench.HTTPSLoad{Conns: *conns, Download: *download}
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	for r := range max(c.repeats, 1) {
		// direct first, then each target, every repeat: interleaved.
		res, err := bench.MeasureHTTPS(ctx, "direct", up.Addr(), 0, load)
		if err != nil {
			return err
		}
		res.Repeat = r
		rep.HTTPS443 = append(rep.HTTPS443, res)
		for _, t := range ts {
			if !t.TLS.IsValid() {
				return fmt.Errorf("target %s has no TURN-TLS address", t.Name)
			}
			res, err := bench.MeasureHTTPS(ctx, t.Name, t.TLS, t.PID, load)
			if err != nil {
				return err
			}
			res.Repeat = r
			rep.HTTPS443 = append(rep.HTTPS443, res)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\trepeat\tconns\terrors\tp50 µs\tp99 µs\tconns/s\tserver µs/conn\tdownload MB/s\tserver ms/MB")
	for _, x := range rep.HTTPS443 {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\n", x.Path, x.Repeat, x.Conns, x.Errors,
			x.ConnP50, x.ConnP99, x.ConnsPerSec, x.ServerCPUPerConn, x.DownloadMBps, x.ServerCPUPerMB)
	}
	_ = tw.Flush()
	return c.finish(rep)
}
