package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// servePprof serves CPU, heap and other runtime profiles on addr (ternd --pprof), on a mux of
// its own so the health and metrics endpoints never expose them. It logs and returns if the
// address cannot be served.
func servePprof(addr string, log *slog.Logger) {
	srv := &http.Server{Addr: addr, Handler: pprofMux(), ReadHeaderTimeout: 5 * time.Second}
	log.Info("profiling endpoints", "address", addr)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("profiling endpoints stopped", "address", addr, "error", err)
	}
}

// pprofMux serves the endpoints of net/http/pprof that go tool pprof and go tool trace use
// (/debug/pprof/NAME with ?debug= and heap's ?gc=, profile and trace with ?seconds=, symbol,
// cmdline, and an index), written on runtime/pprof directly. Importing net/http/pprof would
// cost every ternd ~0.45 MB of idle resident memory, --pprof or not: its init registers its
// handlers on http.DefaultServeMux and it links internal/profile, for delta profiles. Those
// are what is left out: ?seconds= on heap, allocs, block, mutex and the other named profiles
// answers 400; take two profiles and compare them with go tool pprof -diff_base.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprofNamed)
	mux.HandleFunc("/debug/pprof/cmdline", pprofCmdline)
	mux.HandleFunc("/debug/pprof/profile", pprofCPU)
	mux.HandleFunc("/debug/pprof/symbol", pprofSymbol)
	mux.HandleFunc("/debug/pprof/trace", pprofTrace)
	return mux
}

// pprofNamed serves /debug/pprof/NAME, a runtime/pprof profile, or the index at /debug/pprof/.
func pprofNamed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	if name == "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "/debug/pprof/ profiles (?debug=1 for text, heap?gc=1 to collect garbage first):")
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(w, "%8d %s\n", p.Count(), p.Name())
		}
		fmt.Fprintln(w, "and profile?seconds=N (CPU), trace?seconds=N, symbol, cmdline")
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		pprofError(w, http.StatusNotFound, "Unknown profile")
		return
	}
	if r.FormValue("seconds") != "" {
		pprofError(w, http.StatusBadRequest, "delta profiles (seconds=) are not served by ternd; take two profiles and use go tool pprof -diff_base")
		return
	}
	if gc, _ := strconv.Atoi(r.FormValue("gc")); name == "heap" && gc > 0 {
		runtime.GC()
	}
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, name))
	}
	_ = p.WriteTo(w, debug)
}

func pprofCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(os.Args, "\x00"))
}

// pprofCPU profiles the CPU for ?seconds= (default 30).
func pprofCPU(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sec, err := strconv.ParseInt(r.FormValue("seconds"), 10, 64)
	if sec <= 0 || err != nil {
		sec = 30
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	if err := pprof.StartCPUProfile(w); err != nil {
		pprofError(w, http.StatusInternalServerError, "Could not enable CPU profiling: "+err.Error())
		return
	}
	pprofSleep(r, time.Duration(sec)*time.Second)
	pprof.StopCPUProfile()
}

// pprofTrace records an execution trace for ?seconds= (default 1).
func pprofTrace(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sec, err := strconv.ParseFloat(r.FormValue("seconds"), 64)
	if sec <= 0 || err != nil {
		sec = 1
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
	if err := trace.Start(w); err != nil {
		pprofError(w, http.StatusInternalServerError, "Could not enable tracing: "+err.Error())
		return
	}
	pprofSleep(r, time.Duration(sec*float64(time.Second)))
	trace.Stop()
}

// pprofSymbol maps program counters ("0x1234+0x5678", in the query or a POST body) to
// function names, as pprof's remote symbolization expects.
func pprofSymbol(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var buf bytes.Buffer
	buf.WriteString("num_symbols: 1\n")
	var in *bufio.Reader
	if r.Method == http.MethodPost {
		in = bufio.NewReader(r.Body)
	} else {
		in = bufio.NewReader(strings.NewReader(r.URL.RawQuery))
	}
	for {
		word, err := in.ReadSlice('+')
		if err == nil {
			word = word[:len(word)-1]
		}
		if pc, _ := strconv.ParseUint(string(word), 0, 64); pc != 0 {
			if f := runtime.FuncForPC(uintptr(pc)); f != nil {
				fmt.Fprintf(&buf, "%#x %s\n", pc, f.Name())
			}
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintf(&buf, "reading request: %v\n", err)
			}
			break
		}
	}
	_, _ = w.Write(buf.Bytes())
}

func pprofSleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func pprofError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Go-Pprof", "1")
	w.Header().Del("Content-Disposition")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}
