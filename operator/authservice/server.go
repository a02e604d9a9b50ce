package authservice

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves a Handler over plain HTTP, as STUNner's auth service does
// (it belongs inside the cluster: its answers are credentials). It is a
// controller-runtime Runnable that runs on every replica, leader or not.
type Server struct {
	handler http.Handler
	log     *slog.Logger
	ln      net.Listener
}

// Listen binds addr (host:port; ":8088" for STUNner's port, port 0 for any)
// for h, so that a taken port fails the operator's start rather than a
// later Start. Addr reports the bound address.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{handler: h, log: log, ln: ln}, nil
}

// Addr is the address the server is bound to.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// NeedLeaderElection is false: every operator replica answers, since
// answering only reads the cache.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then lets requests in flight finish for up
// to 5 seconds. It returns nil after such a stop, or the error that ended
// serving.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(s.ln) }()
	s.log.Info("auth service listening", "addr", s.ln.Addr().String())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(stop)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return err
}
