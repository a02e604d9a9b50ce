package takeover

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConnCarriesState sends 300 descriptors (two SCM_RIGHTS messages)
// and a snapshot of several chunks over a real hand-over socket, which is
// owner-only.
func TestConnCarriesState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "ternd.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode(), err)
	}
	var r [2]int
	if err := unix.Pipe(r[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(r[0])
	defer unix.Close(r[1])
	fds := make([]int, 300)
	for i := range fds {
		fds[i] = r[1]
	}
	snap := make([]byte, 3*chunk+5)
	for i := range snap {
		snap[i] = byte(i)
	}
	done := make(chan error, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			done <- err
			return
		}
		old := NewConn(c)
		defer old.Close()
		if err := old.ExpectHello(); err != nil {
			done <- err
			return
		}
		if err := old.SendState(snap, fds); err != nil {
			done <- err
			return
		}
		if err := old.ExpectReady(); err != nil {
			done <- err
			return
		}
		done <- old.Bye()
	}()
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	got, gotFDs, err := c.RecvState()
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(gotFDs)
	if string(got) != string(snap) || len(gotFDs) != len(fds) {
		t.Fatalf("got %d snapshot bytes and %d descriptors, want %d and %d", len(got), len(gotFDs), len(snap), len(fds))
	}
	// The last descriptor is the pipe's write end: what it writes, the read end reads.
	if _, err := unix.Write(gotFDs[len(gotFDs)-1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := unix.Read(r[0], b[:]); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("read %d %v %q through a received descriptor", n, err, b)
	}
	if err := c.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := c.ExpectBye(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	if _, err := Listen(path); err == nil {
		t.Fatal("a second Listen took a socket a live process listens on")
	}
}
