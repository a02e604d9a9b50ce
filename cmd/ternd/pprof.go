package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves CPU, heap and other runtime profiles on addr (ternd --pprof), on a mux of
// its own so the health and metrics endpoints never expose them. It logs and returns if the
// address cannot be served.
func servePprof(addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("profiling endpoints", "address", addr)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("profiling endpoints stopped", "address", addr, "error", err)
	}
}
