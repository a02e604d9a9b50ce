package mirror

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/offload"
)

// TestWhy: each error Open returns maps to the reason a pod reports, a
// missing privilege winning over the attachment it made fail.
func TestWhy(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, offloadmode.ReasonAttached},
		{fmt.Errorf("%w: load: %w", offload.ErrUnsupported, offload.ErrNoPrivilege), offloadmode.ReasonMissingCapability},
		{fmt.Errorf("%w: %w: %w", offload.ErrAttachRefused, offload.ErrUnsupported, offload.ErrNoPrivilege), offloadmode.ReasonMissingCapability},
		{fmt.Errorf("%w: tcx: %w", offload.ErrAttachRefused, offload.ErrUnsupported), offloadmode.ReasonAttachRefused},
		{fmt.Errorf("%w: %w", offload.ErrUnsupported, offload.ErrNoInterface), offloadmode.ReasonNoInterface},
		{offload.ErrNoInterface, offloadmode.ReasonNoInterface},
		{fmt.Errorf("%w: no BPF_PROG_TYPE_SCHED_CLS", offload.ErrUnsupported), offloadmode.ReasonUnsupported},
		{errors.New("netlink: bad"), offloadmode.ReasonFailed},
	} {
		if got := why(c.err); got != c.want {
			t.Errorf("why(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
