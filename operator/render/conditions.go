package render

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// condition returns a condition with no LastTransitionTime: the controller
// sets it (meta.SetStatusCondition does) only when Status changes, and
// leaving it out keeps Render deterministic.
func condition(typ string, ok bool, reason, message string, generation int64) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: message, ObservedGeneration: generation}
}

// joinMessages joins problem messages into one condition message, bounded
// by the 32768 bytes the API allows.
func joinMessages(ps []Problem) string {
	msg := ""
	for i, p := range ps {
		s := p.Message
		if p.Field != "" {
			s = p.Field + ": " + s
		}
		if i > 0 {
			s = "; " + s
		}
		if len(msg)+len(s) > 32000 {
			return msg + "; ..."
		}
		msg += s
	}
	return msg
}
