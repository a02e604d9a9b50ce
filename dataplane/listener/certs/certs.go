// Package certs serves a TURN-TLS or TURN-DTLS listener's certificate and
// key pair from its files, reloading it when they change, for both
// crypto/tls and pion/dtls handshakes. It has one lock, Holder.mu, which
// guards the PEM files' contents; nothing outside the package is called
// under it but the logger.
package certs

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/pion/dtls/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/mountwatch"
)

// certPollInterval is how often a Holder re-reads its files even when
// the watcher reported nothing: a watch can miss changes (inotify limits,
// file systems that send no events, a directory replaced as a whole), and a
// certificate left to expire is worse than two small reads every 30 s.
var certPollInterval = 30 * time.Second

// certDebounce lets a burst of events (a Secret update writes the
// certificate, the key and the ..data symlink one after another) settle
// into one reload, so a half-written pair is rarely even tried.
const certDebounce = 100 * time.Millisecond

// Holder serves a TLS or DTLS listener's current certificate and key
// pair and reloads it when the files change, so that a renewed certificate
// (cert-manager rotating a Secret mounted by kubelet) reaches new
// handshakes without restarting the listener and dropping its allocations.
// Connections already established keep the pair they were made with.
type Holder struct {
	lc  config.Listener
	log *slog.Logger
	cur atomic.Pointer[tls.Certificate]

	mu        sync.Mutex // guards certPEM, keyPEM: reloads from the watcher and the poll
	certPEM   []byte
	keyPEM    []byte
	watcher   *fsnotify.Watcher // nil when no watch could be set: polling only
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New loads lc's certificate and key and starts watching their
// directories. It returns the error of the first load (unreadable file, a
// pair that does not match), naming the listener and the files; later
// failed reloads are logged and keep the pair in use.
func New(lc config.Listener, log *slog.Logger) (*Holder, error) {
	pair, cert, key, err := loadKeyPair(lc)
	if err != nil {
		return nil, err
	}
	h := &Holder{lc: lc, log: log, certPEM: cert, keyPEM: key, stop: make(chan struct{}), done: make(chan struct{})}
	h.cur.Store(&pair)
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("cannot watch certificate files, polling them", "listener", lc.Name, "every", certPollInterval, "error", err)
	} else {
		// Watch the directories, not the files: kubelet swaps a Secret
		// volume's ..data symlink, and an editor or `mv` replaces the file,
		// and a watch on the old inode sees neither.
		for _, dir := range uniqueDirs(lc.Cert, lc.Key) {
			if err := w.Add(dir); err != nil {
				log.Warn("cannot watch certificate directory, polling it", "listener", lc.Name, "dir", dir, "error", err)
			}
		}
		h.watcher = w
	}
	go h.run()
	return h, nil
}

func uniqueDirs(paths ...string) []string {
	var out []string
	for _, p := range paths {
		d := filepath.Dir(p)
		dup := false
		for _, o := range out {
			dup = dup || o == d
		}
		if !dup {
			out = append(out, d)
		}
	}
	return out
}

// GetCertificate is tls.Config.GetCertificate: the current pair.
func (h *Holder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return h.cur.Load(), nil
}

// GetDTLSCertificate is dtls.Config.GetCertificate: the current pair.
func (h *Holder) GetDTLSCertificate(*dtls.ClientHelloInfo) (*tls.Certificate, error) {
	return h.cur.Load(), nil
}

// PEM returns the certificate and key files' contents of the pair in use.
func (h *Holder) PEM() (cert, key []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.certPEM, h.keyPEM
}

func (h *Holder) run() {
	defer close(h.done)
	mountwatch.Loop(h.stop, h.watcher, certPollInterval, certDebounce,
		func(err error) { h.log.Warn("certificate watch error", "listener", h.lc.Name, "error", err) },
		h.reload)
}

// reload reads the files and swaps in their pair when it differs from the
// one in use and is valid. A pair that fails to load is logged and the old
// one kept: a Secret caught between its certificate and key updates, or a
// bad renewal, must not take TLS down.
func (h *Holder) reload() {
	h.mu.Lock()
	defer h.mu.Unlock()
	cert, err1 := os.ReadFile(h.lc.Cert)
	key, err2 := os.ReadFile(h.lc.Key)
	if err1 == nil && err2 == nil && bytes.Equal(cert, h.certPEM) && bytes.Equal(key, h.keyPEM) {
		return
	}
	pair, cert, key, err := loadKeyPair(h.lc)
	if err != nil {
		h.log.Error("certificate reload failed, keeping the previous certificate", "listener", h.lc.Name, "error", err)
		return
	}
	h.certPEM, h.keyPEM = cert, key
	h.cur.Store(&pair)
	attrs := []any{"listener", h.lc.Name, "cert", h.lc.Cert}
	if pair.Leaf != nil {
		attrs = append(attrs, "subject", pair.Leaf.Subject.String(), "not_after", pair.Leaf.NotAfter)
	}
	h.log.Info("certificate reloaded", attrs...)
}

// Close stops the watcher. It is safe to call more than once.
func (h *Holder) Close() {
	h.closeOnce.Do(func() {
		close(h.stop)
		<-h.done
		if h.watcher != nil {
			h.watcher.Close()
		}
	})
}

// loadKeyPair reads a listener's PEM certificate and key, with errors that
// name the listener and the file.
func loadKeyPair(lc config.Listener) (tls.Certificate, []byte, []byte, error) {
	cert, err := os.ReadFile(lc.Cert)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: cert: %w", lc.Name, err)
	}
	key, err := os.ReadFile(lc.Key)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: key: %w", lc.Name, err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("listener %q: certificate and key %s, %s: %w", lc.Name, lc.Cert, lc.Key, err)
	}
	return pair, cert, key, nil
}
