package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// ConditionOffloadRequested is the Gateway condition that reports a
// Dataplane's offloadEngine other than None. It says what was asked for,
// not what runs: each pod decides at start whether the kernel lets it
// attach, and an Auto pod that may not falls back to sockets. That
// outcome is the pod's to report (tern_offload_active, its log line and
// offloadmode.ReportPath); the controller sums the ready pods' reports
// into ConditionOffloadActive (docs/offload-control.md).
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
		"whether the ready pods attached is the condition OffloadActive"
	return condition(ConditionOffloadRequested, true, mode, msg, generation)
}

// ConditionOffloadActive is the Gateway condition that says whether the
// eBPF fast path runs in the Gateway's ready pods, as each pod reports it
// at its health port (offloadmode.ReportPath): True when every ready pod
// attached; False when the Dataplane asks for none (NotRequested) or a
// pod relays through sockets (the pod's reason: MissingCapability,
// AttachRefused, NoInterface, Unsupported, Failed); Unknown while no
// ready pod has answered (Pending, NoReport). docs/offload-control.md.
const ConditionOffloadActive = "OffloadActive"

// Reasons of OffloadActive besides the pods' (offloadmode.Reason*).
const (
	// ReasonOffloadPending: no pod of the Gateway is ready yet.
	ReasonOffloadPending = "Pending"
	// ReasonOffloadNoReport: a ready pod did not answer at its health
	// port (disableHealthCheck, a NetworkPolicy, a ternd that predates
	// the report).
	ReasonOffloadNoReport = "NoReport"
)

// PodOffload is what one ready dataplane pod reported at
// offloadmode.ReportPath, or why it could not be read.
type PodOffload struct {
	// Pod is the pod's name.
	Pod string
	// Report is what the pod served; meaningful when Err is nil.
	Report offloadmode.Report
	// Err is why the report could not be read.
	Err error
}

// maxOffloadPods bounds how many pods a condition message names.
const maxOffloadPods = 3

// OffloadActiveCondition sums the reports of a Gateway's ready pods into
// its OffloadActive condition. requested is whether its Dataplane asks for
// offload (the OffloadRequested condition); pods are sorted by name.
func OffloadActiveCondition(requested bool, pods []PodOffload, generation int64) metav1.Condition {
	if !requested {
		return condition(ConditionOffloadActive, false, offloadmode.ReasonNotRequested,
			"the Dataplane's offloadEngine is None: every packet goes through sockets", generation)
	}
	if len(pods) == 0 {
		c := condition(ConditionOffloadActive, false, ReasonOffloadPending, "no dataplane pod of the Gateway is ready yet", generation)
		c.Status = metav1.ConditionUnknown
		return c
	}
	var active, inactive, unread []PodOffload
	for _, p := range pods {
		switch {
		case p.Err != nil:
			unread = append(unread, p)
		case p.Report.Active:
			active = append(active, p)
		default:
			inactive = append(inactive, p)
		}
	}
	n := len(pods)
	switch {
	case len(inactive) > 0:
		var parts []string
		for _, p := range inactive[:min(len(inactive), maxOffloadPods)] {
			parts = append(parts, p.Pod+": "+p.Report.Reason+": "+p.Report.Message)
		}
		msg := fmt.Sprintf("%d of %d ready pods relay through sockets (%s)", len(inactive), n, strings.Join(parts, "; "))
		return condition(ConditionOffloadActive, false, inactive[0].Report.Reason, msg, generation)
	case len(unread) > 0:
		var parts []string
		for _, p := range unread[:min(len(unread), maxOffloadPods)] {
			parts = append(parts, p.Pod+": "+p.Err.Error())
		}
		msg := fmt.Sprintf("%d of %d ready pods did not report at port %d%s (%s)", len(unread), n, HealthPort, offloadmode.ReportPath, strings.Join(parts, "; "))
		c := condition(ConditionOffloadActive, false, ReasonOffloadNoReport, msg, generation)
		c.Status = metav1.ConditionUnknown
		return c
	}
	msg := fmt.Sprintf("%d of %d ready pods relay ChannelData in the kernel; %s: %s", len(active), n, active[0].Pod, describeInterfaces(active[0].Report))
	return condition(ConditionOffloadActive, true, offloadmode.ReasonAttached, msg, generation)
}

// describeInterfaces says how r's programs run, e.g. "eth0 TC (tcx,
// same_interface)".
func describeInterfaces(r offloadmode.Report) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(r.Interfaces)) {
		i := r.Interfaces[name]
		parts = append(parts, fmt.Sprintf("%s %s (%s, %s)", name, i.Hook, i.Attach, i.Egress))
	}
	if len(parts) == 0 {
		return r.Attached
	}
	return strings.Join(parts, ", ")
}
