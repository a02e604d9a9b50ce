package udpbatch

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestBlockingClose: Close wakes a ReadBatch blocked in the kernel, which
// returns an error instead of hanging or reporting an empty batch.
func TestBlockingClose(t *testing.T) {
	c, err := ListenBlocking(netip.MustParseAddrPort("127.0.0.1:0"), Options{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	tid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		// The reader's thread is its own for the test, so the thread id
		// names where ReadBatch blocks.
		runtime.LockOSThread()
		tid <- unix.Gettid()
		in := []Message{{Buf: make([]byte, 64)}}
		_, err := c.ReadBatch(in)
		done <- err
	}()
	waitInSyscall(t, <-tid, unix.SYS_RECVMMSG)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("blocked ReadBatch returned no error after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the blocked ReadBatch")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}

// waitInSyscall waits until thread tid of this process is blocked in
// system call nr, as /proc/self/task/<tid>/syscall reports it (its first
// field is the number of the call the thread is in).
func waitInSyscall(t *testing.T, tid int, nr uintptr) {
	t.Helper()
	path := fmt.Sprintf("/proc/self/task/%d/syscall", tid)
	want := strconv.FormatUint(uint64(nr), 10)
	testenv.Eventually(t, 5*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if f := strings.Fields(string(b)); len(f) == 0 || f[0] != want {
			return fmt.Errorf("reader not blocked in system call %d: %s", nr, b)
		}
		return nil
	})
}
