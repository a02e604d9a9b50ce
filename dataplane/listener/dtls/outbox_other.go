//go:build !linux

package dtls

import (
	"errors"
	"net/netip"
	"syscall"

	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
)

// outbox is Linux's batch of sealed records; elsewhere there is none, and
// relay workers' messages are sealed and sent one by one.
type outbox struct{}

func newOutboxes(syscall.RawConn, int) []*outbox { return nil }

func (*outbox) queue(*record.Records, netip.AddrPort, netip.Addr, []byte) (bool, error) {
	return false, errors.New("dtls: no outbox")
}

func (*outbox) flush() {}
