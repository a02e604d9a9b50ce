package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stunnerdconf"
)

// configPath turns stunnerd's config origin (-c) into a file name.
// stunnerd takes a file as "file://<path>"; STUNner's Helm chart writes
// "file://etc/stunnerd/stunnerd.conf", which stunnerd reads as the absolute
// path, so a relative path that does not exist falls back to "/"+path.
// Config discovery service origins are told apart first (cdsOriginOf);
// stunnerd's "k8s" origin, which finds the service through the Kubernetes
// API, is an error: give the service's address.
func configPath(origin string) (string, error) {
	if rest, ok := strings.CutPrefix(origin, "file://"); ok {
		if !filepath.IsAbs(rest) {
			if _, err := os.Stat(rest); err != nil {
				if _, errAbs := os.Stat("/" + rest); errAbs == nil {
					return "/" + rest, nil
				}
			}
		}
		return rest, nil
	}
	if origin == "k8s" || strings.Contains(origin, "://") {
		return "", fmt.Errorf("config origin %q: ternd reads a config file (-c <file> or -c file://<path>), a config discovery service (-c http://<address>:13478), or a ConfigMap (--configmap); stunnerd's \"k8s\" discovery is not supported: give the service's address", origin)
	}
	return origin, nil
}

// cdsOriginOf reports whether origin (-c) names a config discovery
// service, and returns it as a URL: an http://, https://, ws:// or wss://
// URL as is, and, as stunnerd reads it, an address:port that is not an
// existing file as http://address:port.
func cdsOriginOf(origin string) (string, bool) {
	for _, p := range []string{"http://", "https://", "ws://", "wss://"} {
		if strings.HasPrefix(origin, p) {
			return origin, true
		}
	}
	if strings.Contains(origin, "://") || origin == "k8s" {
		return "", false
	}
	if _, err := os.Stat(origin); err != nil {
		if _, _, errHP := net.SplitHostPort(origin); errHP == nil {
			return "http://" + origin, true
		}
	}
	return "", false
}

// configFile loads ternd's config from a file in Tern's format or in
// stunnerd's (told apart by stunnerdconf.Detect).
type configFile struct {
	getenv func(string) string
	// tlsDir holds the certificates and keys inlined in a stunnerd config,
	// a private directory for the life of the process, removed by close.
	tlsDir string
	mu     sync.Mutex
	// log, once set, gets what loading stunnerd's format ignores; before
	// that (the first load happens before the logger exists) notes are kept
	// in pending.
	log     *slog.Logger
	pending []string
}

func (f *configFile) load(path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if !stunnerdconf.Detect(data) {
		c, err := config.Parse(data, f.getenv)
		if err != nil {
			return nil, fmt.Errorf("load config %s: %w", path, err)
		}
		return c, nil
	}
	c, notes, err := stunnerdconf.Parse(data, stunnerdconf.Options{Getenv: f.getenv, WriteTLS: f.writeTLS})
	if err != nil {
		return nil, fmt.Errorf("load stunnerd config %s: %w", path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range notes {
		if f.log != nil {
			f.log.Info("stunnerd config: "+n, "file", path)
		} else {
			f.pending = append(f.pending, n)
		}
	}
	return c, nil
}

// setLogger logs the notes of loads so far and those of later loads.
func (f *configFile) setLogger(log *slog.Logger, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = log
	for _, n := range f.pending {
		log.Info("stunnerd config: "+n, "file", path)
	}
	f.pending = nil
}

// writeTLS stores a listener's inline certificate and key as files, which
// is what Tern's listeners read (and watch for renewals). Each load
// rewrites them in place, so a changed certificate in a watched stunnerd
// config reaches the listener.
func (f *configFile) writeTLS(listener string, cert, key []byte) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tlsDir == "" {
		dir, err := os.MkdirTemp("", "ternd-tls-")
		if err != nil {
			return "", "", err
		}
		f.tlsDir = dir
	}
	// Listener names hold "/" (namespace/gateway/listener).
	base := filepath.Join(f.tlsDir, strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(listener))
	certPath, keyPath := base+".crt", base+".key"
	if err := writeFileAtomic(certPath, cert); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(keyPath, key); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func (f *configFile) close() {
	if f.tlsDir != "" {
		os.RemoveAll(f.tlsDir)
	}
}

// writeFileAtomic replaces path by rename, so a listener reloading its
// certificate never reads half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
