package offload

import (
	"net"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/tern-gw/tern/internal/netnstest"
)

// The namespaces, veths and addresses here exist only inside network
// namespaces the tests create and remove (internal/netnstest); nothing on
// the host changes. These are its helpers under the names the tests use.

func requireRoot(t testing.TB)                                 { t.Helper(); netnstest.RequireRoot(t) }
func uniq() string                                             { return netnstest.Uniq() }
func newNetns(t testing.TB, name string) string                { t.Helper(); return netnstest.New(t, name) }
func run(t testing.TB, args ...string)                         { t.Helper(); netnstest.Run(t, args...) }
func inNetns(t testing.TB, name string, fn func() error) error { return netnstest.In(t, name, fn) }

// xdpPass attaches tern_xdp_pass to ifname in ns until the test ends.
func xdpPass(t testing.TB, ns, ifname string) {
	t.Helper()
	var objs ternObjects
	if err := loadObjects(&objs); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	err := inNetns(t, ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: objs.TernXdpPass, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if err != nil {
		t.Fatalf("XDP pass on %s: %v", ifname, err)
	}
}
