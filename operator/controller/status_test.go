package controller

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestCarryTransitions(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	cond := func(typ string, st metav1.ConditionStatus, msg string, at metav1.Time) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: "R", Message: msg, LastTransitionTime: at}
	}
	tests := []struct {
		name      string
		old, want []metav1.Condition
		out       []metav1.Condition
	}{
		{
			name: "new condition stamped now",
			want: []metav1.Condition{cond("Accepted", "True", "", metav1.Time{})},
			out:  []metav1.Condition{cond("Accepted", "True", "", now)},
		},
		{
			name: "unchanged status keeps its time, message updates",
			old:  []metav1.Condition{cond("Accepted", "True", "old", then)},
			want: []metav1.Condition{cond("Accepted", "True", "new", metav1.Time{})},
			out:  []metav1.Condition{cond("Accepted", "True", "new", then)},
		},
		{
			name: "flipped status stamped now",
			old:  []metav1.Condition{cond("Accepted", "True", "", then)},
			want: []metav1.Condition{cond("Accepted", "False", "broken", metav1.Time{})},
			out:  []metav1.Condition{cond("Accepted", "False", "broken", now)},
		},
		{
			name: "conditions no longer wanted dropped",
			old:  []metav1.Condition{cond("Accepted", "True", "", then), cond("Stale", "True", "", then)},
			want: []metav1.Condition{cond("Accepted", "True", "", metav1.Time{})},
			out:  []metav1.Condition{cond("Accepted", "True", "", then)},
		},
		{name: "nothing wanted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := carryTransitions(tt.old, tt.want, now); !reflect.DeepEqual(got, tt.out) {
				t.Errorf("got  %+v\nwant %+v", got, tt.out)
			}
		})
	}
}

func TestMergeParents(t *testing.T) {
	const ours, theirs = gwapiv1.GatewayController("stunner.l7mp.io/gateway-operator"), gwapiv1.GatewayController("example.com/other")
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	parent := func(gw string, ctl gwapiv1.GatewayController, st metav1.ConditionStatus, at metav1.Time) gwapiv1.RouteParentStatus {
		return gwapiv1.RouteParentStatus{
			ParentRef:      gwapiv1.ParentReference{Name: gwapiv1.ObjectName(gw)},
			ControllerName: ctl,
			Conditions:     []metav1.Condition{{Type: "Accepted", Status: st, Reason: "R", LastTransitionTime: at}},
		}
	}
	tests := []struct {
		name      string
		cur, mine []gwapiv1.RouteParentStatus
		wantNames []string // parentRef names in order
		wantTimes []metav1.Time
	}{
		{
			name:      "other controllers' entries kept first",
			cur:       []gwapiv1.RouteParentStatus{parent("foreign", theirs, "True", then)},
			mine:      []gwapiv1.RouteParentStatus{parent("gw", "", "True", metav1.Time{})},
			wantNames: []string{"foreign", "gw"},
		},
		{
			name:      "our old entry replaced, time carried",
			cur:       []gwapiv1.RouteParentStatus{parent("gw", ours, "True", then)},
			mine:      []gwapiv1.RouteParentStatus{parent("gw", ours, "True", metav1.Time{})},
			wantNames: []string{"gw"},
			wantTimes: []metav1.Time{then},
		},
		{
			name:      "detached route loses our entry",
			cur:       []gwapiv1.RouteParentStatus{parent("gw", ours, "True", then), parent("foreign", theirs, "True", then)},
			wantNames: []string{"foreign"},
		},
		{name: "empty stays empty, not nil", wantNames: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeParents(tt.cur, tt.mine, ours)
			if got == nil {
				t.Fatal("nil parents: the CRDs require the field")
			}
			names := []string{}
			for _, p := range got {
				names = append(names, string(p.ParentRef.Name))
				if p.ParentRef.Name != "foreign" && p.ControllerName != ours {
					t.Errorf("parent %s: controllerName %q, want %q", p.ParentRef.Name, p.ControllerName, ours)
				}
			}
			if !reflect.DeepEqual(names, tt.wantNames) {
				t.Errorf("parents %v, want %v", names, tt.wantNames)
			}
			for i, at := range tt.wantTimes {
				if got := got[i].Conditions[0].LastTransitionTime; !got.Equal(&at) {
					t.Errorf("parent %d: lastTransitionTime %v, want %v", i, got, at)
				}
			}
		})
	}
}
