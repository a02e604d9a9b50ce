package offload

import (
	"fmt"
	"net"

	"github.com/tern-gw/tern/dataplane/offload/tcattach"
)

// attachTCX is tcattach.TCX; TestAutoFallsBackToClsact makes it
// refuse, as a kernel before 6.6 does.
var attachTCX = tcattach.TCX

// attachTC attaches the tc program to ifc's ingress by attach: tcx, or a
// clsact qdisc with a direct-action bpf filter through o.nl where tcx is
// refused (AttachAuto) or asked for (AttachClsact). It returns the
// attachment and "tcx" or "clsact", and why.
func (o *Offload) attachTC(attach Attach, ifc *net.Interface) (tcattach.Detacher, string, string, error) {
	if attach != AttachClsact {
		l, err := attachTCX(o.objs.TernTc, ifc)
		if err == nil {
			return l, "tcx", "tcx attached", nil
		}
		if attach == AttachTCX || !tcattach.TCXRefused(err) {
			return nil, "", "", unsupported(fmt.Sprintf("attach tcx ingress to %s", ifc.Name), err)
		}
		c, cerr := tcattach.Clsact(o.nl, o.objs.TernTc, ifc)
		if cerr != nil {
			return nil, "", "", unsupported(fmt.Sprintf("attach clsact ingress filter to %s (tcx: %v)", ifc.Name, err), cerr)
		}
		return c, "clsact", fmt.Sprintf("tcx refused (%v)", err), nil
	}
	c, err := tcattach.Clsact(o.nl, o.objs.TernTc, ifc)
	if err != nil {
		return nil, "", "", unsupported(fmt.Sprintf("attach clsact ingress filter to %s", ifc.Name), err)
	}
	return c, "clsact", "clsact asked for", nil
}
