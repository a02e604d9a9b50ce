package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestNodePredicatePodCIDRs: a Node update that sets its pod CIDRs (which
// kube-controller-manager does after the Node is created) re-renders, as
// it may make the cluster dual-stack; a heartbeat does not.
func TestNodePredicatePodCIDRs(t *testing.T) {
	p := nodeAddressesChanged()
	old := &corev1.Node{}
	cidrs := &corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24", "fd00:10:244::/64"}}}
	heartbeat := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}}}}
	for _, tc := range []struct {
		name string
		new  *corev1.Node
		want bool
	}{
		{"pod CIDRs set", cidrs, true},
		{"heartbeat", heartbeat, false},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: re-render %v, want %v", tc.name, got, tc.want)
		}
	}
}
