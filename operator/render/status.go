package render

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// gatewayStatus returns the status to write on gw: Accepted and Programmed,
// one ListenerStatus per listener, and the addresses known.
func (r *renderer) gatewayStatus(gw *gwapiv1.Gateway, res *GatewayResult, listeners []*listenerState,
	fatal, dpProblem []Problem, addrs []gwapiv1.GatewayStatusAddress, usable int) gwapiv1.GatewayStatus {
	gen := gw.Generation
	st := gwapiv1.GatewayStatus{Addresses: addrs}
	rendered := res.Config != nil

	accepted := condition(string(gwapiv1.GatewayConditionAccepted), true, string(gwapiv1.GatewayReasonAccepted), "", gen)
	switch {
	case !rendered && usable == 0 && len(listeners) > 0 && onlyListenerFatal(fatal):
		accepted = condition(string(gwapiv1.GatewayConditionAccepted), false, string(gwapiv1.GatewayReasonListenersNotValid), joinMessages(listenerProblems(listeners)), gen)
	case !rendered:
		accepted = condition(string(gwapiv1.GatewayConditionAccepted), false, string(gwapiv1.GatewayReasonInvalidParameters), joinMessages(fatal), gen)
	case usable < len(listeners):
		accepted.Reason = string(gwapiv1.GatewayReasonListenersNotValid)
		accepted.Message = fmt.Sprintf("%d of %d listeners are usable", usable, len(listeners))
	default:
		accepted.Message = "Gateway accepted"
	}

	var programmed metav1.Condition
	ptype := string(gwapiv1.GatewayConditionProgrammed)
	switch {
	case !rendered:
		programmed = condition(ptype, false, string(gwapiv1.GatewayReasonInvalid), "not rendered: see Accepted", gen)
	case res.UnmanagedDataplane && len(addrs) == 0:
		programmed = condition(ptype, false, string(gwapiv1.GatewayReasonAddressNotAssigned), "waiting for an address for Service "+nsName(gw.Namespace, gw.Name), gen)
	case res.UnmanagedDataplane:
		programmed = condition(ptype, true, string(gwapiv1.GatewayReasonProgrammed),
			"dataplane config and Service rendered; no Deployment: "+AnnotationDisableManagedDataplane+" is set, the dataplane is yours to run", gen)
	case res.Deployment == nil && res.DaemonSet == nil:
		programmed = condition(ptype, false, string(gwapiv1.GatewayReasonNoResources), joinMessages(dpProblem), gen)
	case len(addrs) == 0:
		programmed = condition(ptype, false, string(gwapiv1.GatewayReasonAddressNotAssigned), "waiting for an address for Service "+nsName(gw.Namespace, gw.Name), gen)
	default:
		kind := "Deployment"
		if res.DaemonSet != nil {
			kind = "DaemonSet"
		}
		programmed = condition(ptype, true, string(gwapiv1.GatewayReasonProgrammed), "dataplane config, "+kind+" and Service rendered", gen)
	}
	st.Conditions = []metav1.Condition{accepted, programmed}

	for _, ls := range listeners {
		st.Listeners = append(st.Listeners, listenerStatus(ls, rendered, gen))
	}
	return st
}

// onlyListenerFatal reports whether the only reason not to render is that
// no listener is usable.
func onlyListenerFatal(fatal []Problem) bool {
	return len(fatal) == 1 && fatal[0].Field == "spec.listeners"
}

func listenerProblems(listeners []*listenerState) []Problem {
	var out []Problem
	for _, ls := range listeners {
		out = append(out, errorsOnly(ls.problems)...)
	}
	return out
}

func listenerStatus(ls *listenerState, rendered bool, gen int64) gwapiv1.ListenerStatus {
	msg := joinMessages(errorsOnly(ls.problems))
	st := gwapiv1.ListenerStatus{Name: ls.l.Name, SupportedKinds: ls.kinds, AttachedRoutes: int32(len(ls.attached))}
	if st.SupportedKinds == nil {
		st.SupportedKinds = []gwapiv1.RouteGroupKind{}
	}
	if ls.accepted {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionAccepted), true, string(gwapiv1.ListenerReasonAccepted), "", gen))
	} else {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionAccepted), false, ls.acceptReason, msg, gen))
	}
	if ls.conflicted {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionConflicted), true, string(gwapiv1.ListenerReasonProtocolConflict), msg, gen))
	} else {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionConflicted), false, string(gwapiv1.ListenerReasonNoConflicts), "", gen))
	}
	if ls.resolved {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionResolvedRefs), true, string(gwapiv1.ListenerReasonResolvedRefs), "", gen))
	} else {
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionResolvedRefs), false, ls.refReason, msg, gen))
	}
	switch {
	case !ls.usable() || !rendered:
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionProgrammed), false, string(gwapiv1.ListenerReasonInvalid), "not in the dataplane config", gen))
	case !ls.exposed:
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionProgrammed), true, string(gwapiv1.ListenerReasonProgrammed),
			"in the dataplane config but not exposed by the Service: set "+AnnotationMixedProtocol+": \"true\" to expose UDP and TCP listeners together", gen))
	default:
		st.Conditions = append(st.Conditions, condition(string(gwapiv1.ListenerConditionProgrammed), true, string(gwapiv1.ListenerReasonProgrammed), "", gen))
	}
	return st
}
