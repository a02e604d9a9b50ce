package dataplane

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/internal/testenv"
)

// startOffload runs a dataplane from cfg with the --offload-engine flag
// value flag, logging into the returned buffer.
func startOffload(t *testing.T, cfg *config.Config, flag string) (*Server, *testenv.LockedBuffer, error) {
	t.Helper()
	logs := &testenv.LockedBuffer{}
	srv, err := New(cfg, Options{UDPThreads: 2, RelayThreads: 2, OffloadEngine: flag, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		return nil, logs, err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, logs, nil
}

// relayEchoes relays n echoes through a pion client's allocation to a
// loopback peer: the first go out as Send indications, the rest over the
// channel pion binds.
func relayEchoes(t *testing.T, cfg *config.Config, n int) {
	t.Helper()
	peer := startEchoPeer(t, "127.0.0.1")
	relay, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !echo(relay, peer.addr(), []byte(fmt.Sprint("offload echo ", i)), 2*time.Second) {
			t.Fatalf("echo %d lost", i)
		}
	}
}

// TestOffloadNoneChangesNothing: with offload.engine None (and no flag)
// there is no mirror and no engine observer, the socket path relays and
// counts as always, and /metrics says offload is off.
func TestOffloadNoneChangesNothing(t *testing.T) {
	cfg := testConfig(t, 24700, 24719)
	cfg.Offload = config.Offload{Engine: offloadmode.None}
	srv, logs, err := startOffload(t, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	if srv.offload != nil {
		t.Fatal("offload None built a mirror")
	}
	const n = 20
	relayEchoes(t, cfg, n)
	testenv.Eventually(t, 2*time.Second, func() error {
		fams := families(t, cfg)
		for _, w := range []struct {
			name, labels string
			want         float64
		}{
			{"tern_offload_active", "attached=None,interface=,reason=NotRequested,requested=None", 0},
			{"tern_offload_paths", "", 0},
			{"tern_offload_put_errors_total", "", 0},
			{"stunner_cluster_packets_total", "direction=tx,name=local", n},
			{"stunner_cluster_packets_total", "direction=rx,name=local", n},
			{"tern_peer_packets_total", "direction=tx", n},
		} {
			if v, ok := value(fams, w.name, w.labels); !ok || v != w.want {
				return fmt.Errorf("%s{%s} = %v (present %v), want %v", w.name, w.labels, v, ok, w.want)
			}
		}
		return nil
	})
	if strings.Contains(logs.String(), "offload") {
		t.Errorf("offload None logged about offload:\n%s", logs)
	}
}

// TestOffloadAuto: Auto either attaches the programs (root with BPF) or
// falls back to the socket path with one log line saying why; either way
// the dataplane relays every echo and /metrics says which.
func TestOffloadAuto(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	cfg := testConfig(t, 24720, 24739)
	cfg.Offload = config.Offload{Engine: offloadmode.Auto}
	srv, logs, err := startOffload(t, cfg, "")
	if err != nil {
		t.Fatalf("Auto must not fail to start: %v", err)
	}
	attached := srv.offload.Attached()
	if attached == offloadmode.None {
		if n := strings.Count(logs.String(), "offload unavailable, relaying through sockets"); n != 1 {
			t.Errorf("fallback logged %d times:\n%s", n, logs)
		}
		if srv.offload.Active() {
			t.Error("fallen back but active")
		}
	}
	t.Logf("attached: %s", attached)
	const n = 200
	relayEchoes(t, cfg, n)
	want, wantPaths := 0.0, 0.0
	st := srv.offload.Status()
	active := "interface=,reason=" + st.Reason
	if attached != offloadmode.None {
		want, wantPaths = 1, 1 // the channel pion bound
		active = "interface=" + slices.Sorted(maps.Keys(st.Interfaces))[0] + ",reason=Attached"
		if st.Reason != offloadmode.ReasonAttached {
			t.Errorf("attached with reason %q", st.Reason)
		}
	} else if st.Reason == offloadmode.ReasonAttached || st.Message == "" {
		t.Errorf("fallen back with reason %q, message %q", st.Reason, st.Message)
	}
	// Whichever path carried them, every echo is counted once each way.
	testenv.Eventually(t, 2*time.Second, func() error {
		fams := families(t, cfg)
		for _, w := range []struct {
			name, labels string
			want         float64
		}{
			{"tern_offload_active", "attached=" + attached + "," + active + ",requested=Auto", want},
			{"tern_offload_paths", "", wantPaths},
			{"stunner_cluster_packets_total", "direction=tx,name=local", n},
			{"stunner_cluster_packets_total", "direction=rx,name=local", n},
			{"tern_peer_packets_total", "direction=tx", n},
			{"tern_peer_packets_total", "direction=rx", n},
		} {
			if v, ok := value(fams, w.name, w.labels); !ok || v != w.want {
				return fmt.Errorf("%s{%s} = %v (present %v), want %v", w.name, w.labels, v, ok, w.want)
			}
		}
		return nil
	})
	kernel := map[string]*stats.Sum{}
	srv.offload.Fold(kernel)
	if k := kernel["udp"]; k != nil {
		t.Logf("relayed in the kernel: %d to the peer, %d from it, of %d each way", k.PeerTx, k.PeerRx, n)
	} else if attached != offloadmode.None {
		t.Errorf("attached, but the kernel relayed nothing: stats %+v", srv.offload.Status().Kernel)
	}
}

// TestOffloadFlag: --offload-engine overrides the config, and a value
// that is not an engine is refused naming the flag. XDP either attaches or
// fails New with an error naming the engine: it never falls back.
func TestOffloadFlag(t *testing.T) {
	if testenv.InFreshNetns(t) {
		return
	}
	cfg := testConfig(t, 24740, 24759)
	if _, _, err := startOffload(t, cfg, "ebpf"); err == nil || !strings.Contains(err.Error(), "--offload-engine") {
		t.Errorf("bad flag: %v", err)
	}
	srv, _, err := startOffload(t, cfg, "xdp")
	switch {
	case err != nil:
		if !strings.Contains(err.Error(), "offload engine XDP") {
			t.Errorf("XDP refused without naming it: %v", err)
		}
	case srv.offload.Attached() != offloadmode.XDP:
		t.Errorf("XDP requested, %s attached", srv.offload.Attached())
	}
}
