package tlsrecord

import (
	"bytes"
	"encoding/hex"
	"sync"
)

// Secrets is a tls.Config.KeyLogWriter for one connection: it keeps the
// first application traffic secrets crypto/tls logs for it
// (CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0, RFC 8446 §7.1,
// in the NSS key log format) and ignores every other line. A TLS 1.2
// handshake logs neither. Give each connection a Secrets of its own, on a
// tls.Config of its own (tls.Config.GetConfigForClient returning a clone
// with KeyLogWriter set): the log names connections only by their client
// random. It has one lock, mu, under which nothing is called.
type Secrets struct {
	mu             sync.Mutex
	client, server []byte
}

var (
	clientLabel = []byte("CLIENT_TRAFFIC_SECRET_0")
	serverLabel = []byte("SERVER_TRAFFIC_SECRET_0")
)

// Write takes one or more key log lines ("LABEL <client random> <secret>",
// hex). It never fails: a line it does not need or cannot read is skipped,
// since a key log error would fail the handshake.
func (s *Secrets) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(p, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) != 3 {
			continue
		}
		var dst *[]byte
		switch {
		case bytes.Equal(f[0], clientLabel):
			dst = &s.client
		case bytes.Equal(f[0], serverLabel):
			dst = &s.server
		default:
			continue
		}
		secret := make([]byte, hex.DecodedLen(len(f[2])))
		if _, err := hex.Decode(secret, f[2]); err != nil {
			continue
		}
		s.mu.Lock()
		if *dst == nil {
			*dst = secret
		}
		s.mu.Unlock()
	}
	return len(p), nil
}

// Traffic returns the client's and the server's first application traffic
// secrets, and whether both were logged (a TLS 1.3 handshake that has
// finished).
func (s *Secrets) Traffic() (client, server []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client, s.server, s.client != nil && s.server != nil
}
