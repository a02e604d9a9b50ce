package mirror

import (
	"errors"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/offload"
)

// why returns the offloadmode.Reason* code of an error Open returned:
// MissingCapability, NoInterface, AttachRefused, or Unsupported for
// anything else (a kernel without what the programs need).
func why(err error) string {
	switch {
	case err == nil:
		return offloadmode.ReasonAttached
	case errors.Is(err, offload.ErrNoPrivilege):
		return offloadmode.ReasonMissingCapability
	case errors.Is(err, offload.ErrNoInterface):
		return offloadmode.ReasonNoInterface
	case errors.Is(err, offload.ErrAttachRefused):
		return offloadmode.ReasonAttachRefused
	case errors.Is(err, offload.ErrUnsupported):
		return offloadmode.ReasonUnsupported
	}
	return offloadmode.ReasonFailed
}
