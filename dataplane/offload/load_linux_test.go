package offload

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// TestLoad loads the committed objects, so that a program the verifier
// rejects fails with the end of the verifier's log rather than a skip.
func TestLoad(t *testing.T) {
	requireRoot(t)
	var objs ternObjects
	err := loadObjects(&objs)
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		n := len(verr.Log)
		t.Fatalf("verifier rejected the programs:\n%s", strings.Join(verr.Log[max(0, n-30):], "\n"))
	}
	if err != nil {
		openErr := unsupported("load programs", err)
		if errors.Is(openErr, ErrUnsupported) {
			t.Skipf("BPF refused here: %v", err)
		}
		t.Fatal(err)
	}
	objs.Close()
}
