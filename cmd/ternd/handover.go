package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tern-gw/tern/dataplane"
)

// What --after-handover takes.
const (
	// afterHandoverExit: exit 0 once the TCP and TLS connections that
	// stayed with this process have closed (a supervisor that restarts
	// nothing: systemd, a shell).
	afterHandoverExit = "exit"
	// afterHandoverWait: stay up until SIGTERM or SIGINT (a pod's
	// container, which the kubelet would restart if it exited, and the
	// restarted ternd take the sockets back).
	afterHandoverWait = "wait"
)

// waitHandedOver is --after-handover=wait, once this ternd has handed its
// TURN-UDP sockets to its successor: it serves the TCP and TLS connections
// that stayed with it (HandedOver closed its health and metrics
// endpoints, so on a shared network namespace the kubelet's probes reach
// the successor's), and waits for SIGTERM or SIGINT (the DaemonSet
// controller deletes the pod once its successor is ready). On SIGTERM it
// then waits as drainHandedOver does for those connections, at most the
// grace period or until a second signal; it exits without Close, which
// would end the successor's allocations.
func waitHandedOver(srv *dataplane.Server, sig <-chan os.Signal, grace time.Duration, log *slog.Logger) {
	log.Info("handed over to the successor; waiting for SIGTERM (--after-handover=wait)", "connections", srv.StreamConnections())
	s := <-sig
	if s != syscall.SIGTERM {
		log.Info("signal: exiting now", "signal", s.String(), "connections", srv.StreamConnections())
		return
	}
	log.Info("SIGTERM after the hand-over", "connections", srv.StreamConnections())
	drainHandedOver(srv, sig, grace, log)
}

// noPredecessor reports whether err, from dataplane.Takeover, says that
// no ternd listens on the hand-over socket, so that --takeover-or-start
// starts afresh.
func noPredecessor(err error) bool { return errors.Is(err, dataplane.ErrNoPredecessor) }

// parseOwner parses --handover-dir-owner, "UID:GID".
func parseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("want UID:GID, got %q", s)
	}
	if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("want UID:GID with numbers, got %q", s)
	}
	if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
		return 0, 0, fmt.Errorf("want UID:GID with numbers, got %q", s)
	}
	return uid, gid, nil
}

// prepareHandoverDir is --prepare-handover-dir: it makes dir (a hostPath
// both the old and the new pod on a node mount) owned by owner ("UID:GID",
// or this process's when "") with mode 0700, so that the pod's non-root
// ternd can make its hand-over socket there and no other user can reach
// it. The kubelet makes a DirectoryOrCreate hostPath root's, mode 0755.
func prepareHandoverDir(dir, owner string) int {
	uid, gid := os.Getuid(), os.Getgid()
	if owner != "" {
		var err error
		if uid, gid, err = parseOwner(owner); err != nil {
			return exit(fail(2, "--handover-dir-owner: %v", err))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return exit(fail(1, "--prepare-handover-dir: %v", err))
	}
	// chmod before chown: a directory root owns needs no CAP_FOWNER to
	// change its mode (the rendered init container has CHOWN and FOWNER,
	// the latter for a directory an earlier pod's ternd owns already).
	if err := os.Chmod(dir, 0o700); err != nil {
		return exit(fail(1, "--prepare-handover-dir: %v", err))
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return exit(fail(1, "--prepare-handover-dir: %v", err))
	}
	fmt.Printf("ternd: hand-over directory %s ready (owner %d:%d, mode 0700)\n", dir, uid, gid)
	return 0
}
