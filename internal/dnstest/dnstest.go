// Package dnstest is a DNS server for tests: it answers A and AAAA
// questions from a table the test changes while it runs, on 127.0.0.1 over
// UDP, and hands out a net.Resolver that asks it and nothing else.
package dnstest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers from its table; names not in it get NXDOMAIN.
type Server struct {
	conn *net.UDPConn

	mu      sync.Mutex
	records map[string][]netip.Addr // by lower-case fully qualified name
	queries int
}

// Start serves on a free UDP port of 127.0.0.1 until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{conn: c, records: map[string][]netip.Addr{}}
	go s.serve()
	t.Cleanup(func() { c.Close() })
	return s
}

// Set makes host resolve to addrs; no addrs makes it NXDOMAIN.
func (s *Server) Set(host string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[fqdn(host)] = addrs
}

// Queries returns how many questions the server has answered.
func (s *Server) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

// Resolver returns a pure-Go resolver whose every query goes to s, whatever
// /etc/resolv.conf and /etc/hosts say about other servers.
func (s *Server) Resolver() *net.Resolver {
	addr := s.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", addr)
	}}
}

func fqdn(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) + "." }

func (s *Server) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if resp, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteToUDPAddrPort(resp, from)
		}
	}
}

func (s *Server) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	s.queries++
	addrs, found := s.records[strings.ToLower(q.Name.String())]
	found = found && len(addrs) > 0
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, false
			}
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			if err := b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()}); err != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// Close stops answering; queries then time out.
func (s *Server) Close() { s.conn.Close() }
