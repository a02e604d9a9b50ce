package render

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// ConditionOffloadRequested is the Gateway condition that reports a
// Dataplane's offloadEngine other than None. It says what was asked for,
// not what runs: each pod decides at start whether the kernel lets it
// attach, and an Auto pod that may not falls back to sockets. That
// outcome is the pod's tern_offload_active metric and its log line; the
// operator, which sees neither, does not guess (docs/offload-control.md).
const ConditionOffloadRequested = "OffloadRequested"

// offloadEngine returns the offload engine dp asks for, normalized
// (TCMux is TC); offloadmode.None when dp is nil, sets none, or names
// one the CRD's enum would have refused.
func offloadEngine(dp *stnrv1.Dataplane) string {
	if dp == nil {
		return offloadmode.None
	}
	mode, err := offloadmode.NormalizeEngine(dp.Spec.OffloadEngine)
	if err != nil {
		return offloadmode.None
	}
	return mode
}

// offloadCondition is the OffloadRequested condition for a Gateway whose
// Dataplane asks for mode (its reason). The pods' config says Auto for
// every mode, so that a pod that cannot attach relays through sockets
// instead of crash-looping; the message says so.
func offloadCondition(mode string, generation int64) metav1.Condition {
	msg := "the eBPF ChannelData fast path is requested (" + mode + "); ternd runs it as Auto, which picks tc or XDP per interface " +
		"and falls back to sockets with a log line where the kernel or the pod's capabilities refuse BPF; " +
		"each pod reports whether it attached in tern_offload_active"
	return condition(ConditionOffloadRequested, true, mode, msg, generation)
}
