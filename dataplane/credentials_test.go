package dataplane

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
)

// kubeletSecret lays out dir as kubelet does a Secret volume holding one
// key: dir/<key> is a symlink through ..data to a timestamped directory.
// It returns the key's path and a function that rotates the value by
// kubelet's swap (a new directory, ..data_tmp pointed at it, renamed over
// ..data).
func kubeletSecret(t *testing.T, dir, key, value string) (path string, rotate func(value string)) {
	t.Helper()
	gen := 0
	write := func(value string) {
		gen++
		ts := fmt.Sprintf("..2026_11_24_%02d", gen)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, key), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write(value)
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, key), write
}

// syncLog collects a server's log lines, for tests that check what was
// (and was not) logged.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// allocateWith allocates with the given credentials and releases the
// allocation; its error is the server's refusal.
func allocateWith(t *testing.T, cfg *config.Config, pass string) error {
	t.Helper()
	c := pionClient(t, cfg, "user", pass)
	relay, err := c.Allocate()
	if err != nil {
		return err
	}
	return relay.Close()
}

// TestPasswordFileRotation: the password comes from a file in a Secret
// volume; when kubelet swaps in a new value, new allocations need the new
// password within moments, without a restart, and an allocation made
// before keeps relaying. An empty value (a Secret caught mid-edit) keeps
// the password in use. The password never reaches the log.
func TestPasswordFileRotation(t *testing.T) {
	passPath, rotate := kubeletSecret(t, t.TempDir(), "password", "first-password")
	cfg := testConfig(t, 20000, 29999)
	cfg.Auth.Password, cfg.Auth.PasswordFile = "", passPath
	cfg.Limits.AuthFailureBurst = config.NoLimit // the test fails on purpose, often
	logs := &syncLog{}
	startOpts(t, cfg, Options{UDPThreads: 1, RelayThreads: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))})

	peer := startEchoPeer(t, "127.0.0.1")
	old := pionClient(t, cfg, "user", "first-password")
	relay, err := old.Allocate()
	if err != nil {
		t.Fatalf("allocate with the password from the file: %v", err)
	}
	defer relay.Close()
	if !echo(relay, peer.addr(), []byte("before"), 2*time.Second) {
		t.Fatal("no echo before the rotation")
	}
	if err := allocateWith(t, cfg, "pass"); err == nil {
		t.Fatal("the config's inline password is unset, yet a client allocated with it")
	}

	rotate("second-password\n")
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := allocateWith(t, cfg, "second-password"); err != nil {
			return fmt.Errorf("the rotated password is refused: %v", err)
		}
		return nil
	})
	if err := allocateWith(t, cfg, "first-password"); err == nil {
		t.Fatal("the old password still allocates after the rotation")
	}
	if !echo(relay, peer.addr(), []byte("after"), 2*time.Second) {
		t.Fatal("the allocation made before the rotation stopped relaying")
	}

	rotate("")
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "is empty") {
			return fmt.Errorf("the empty password file was not reported")
		}
		return nil
	})
	if err := allocateWith(t, cfg, "second-password"); err != nil {
		t.Fatalf("an empty password file must keep the password in use: %v", err)
	}
	if out := logs.String(); strings.Contains(out, "first-password") || strings.Contains(out, "second-password") {
		t.Fatalf("a password reached the log:\n%s", out)
	}
}

// TestSecretFileErrors: a credential file that cannot be read rejects the
// config, at start and on reconfiguration, naming the field; the running
// credentials stay.
func TestSecretFileErrors(t *testing.T) {
	cfg := testConfig(t, 20000, 29999)
	bad := *cfg
	bad.Auth.Password, bad.Auth.PasswordFile = "", filepath.Join(t.TempDir(), "missing")
	quiet := Options{UDPThreads: 1, RelayThreads: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := New(&bad, quiet); err == nil || !strings.Contains(err.Error(), "auth.passwordFile: open ") {
		t.Fatalf("New with a missing password file: %v, want an error naming auth.passwordFile", err)
	}

	srv := startWith(t, cfg)
	if err := srv.Reconfigure(&bad); err == nil || !strings.Contains(err.Error(), "auth.passwordFile") {
		t.Fatalf("Reconfigure with a missing password file: %v, want an error naming auth.passwordFile", err)
	}
	if err := allocateWith(t, cfg, "pass"); err != nil {
		t.Fatalf("the running password was dropped: %v", err)
	}

	// From inline to a file and back, by reconfiguration.
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next := *cfg
	next.Auth.Password, next.Auth.PasswordFile = "", path
	if err := srv.Reconfigure(&next); err != nil {
		t.Fatal(err)
	}
	if err := allocateWith(t, cfg, "from-file"); err != nil {
		t.Fatalf("the password from the file is refused: %v", err)
	}
	if err := srv.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := allocateWith(t, cfg, "pass"); err != nil {
		t.Fatalf("the inline password is refused after switching back: %v", err)
	}
}
