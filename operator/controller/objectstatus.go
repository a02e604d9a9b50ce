package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

// ConditionValid is the condition the operator sets on GatewayConfigs, StaticServices and
// Dataplanes: False (reason Invalid) when rendering found an error in the object, naming each
// field at fault; True otherwise, with any warnings in its message.
const ConditionValid = "Valid"

// ConditionSubstituted is set True on a Dataplane whose stunnerd image or command the operator
// runs as ternd instead (a STUNner install's own Dataplane), so that `kubectl get dataplane -o
// yaml` shows why the pods do not run what the object says; it is removed otherwise.
const ConditionSubstituted = "Substituted"

// maxConditionMessage is the API's limit on metav1.Condition.Message, in bytes.
const maxConditionMessage = 32768

// writeObjectStatuses sets the Valid condition of every GatewayConfig, StaticService and
// Dataplane from the problems render reported on it. Problems on these objects do not all
// surface on a Gateway (a bad StaticService prefix only shrinks an allowlist), so without
// this they would be seen only in the operator's log.
func (r *Reconciler) writeObjectStatuses(ctx context.Context, in *render.Input, res *render.Result) error {
	byObject := map[render.ObjectRef][]render.Problem{}
	for _, p := range res.Problems {
		if p.Object.Group == stnrv1.GroupName {
			byObject[p.Object] = append(byObject[p.Object], p)
		}
	}
	var errs []error
	write := func(obj client.Object, kind string, status *stnrv1.ObjectStatus) {
		ref := render.ObjectRef{Group: stnrv1.GroupName, Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
		want := validCondition(byObject[ref], obj.GetGeneration())
		next := obj.DeepCopyObject().(client.Object)
		nextStatus := statusOf(next)
		meta.SetStatusCondition(&nextStatus.Conditions, want)
		if kind == "Dataplane" {
			if msg, ok := res.SubstitutedDataplanes[obj.GetName()]; ok {
				meta.SetStatusCondition(&nextStatus.Conditions, metav1.Condition{Type: ConditionSubstituted,
					Status: metav1.ConditionTrue, Reason: "StunnerdReplaced", Message: msg,
					ObservedGeneration: obj.GetGeneration()})
			} else {
				meta.RemoveStatusCondition(&nextStatus.Conditions, ConditionSubstituted)
			}
		}
		if equality.Semantic.DeepEqual(status.Conditions, nextStatus.Conditions) {
			countOp("status", obj, opSuppressed)
			return
		}
		if err := r.patchStatus(ctx, next, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("%s: status: %w", ref, err))
		}
	}
	for i := range in.GatewayConfigs {
		write(&in.GatewayConfigs[i], "GatewayConfig", &in.GatewayConfigs[i].Status)
	}
	for i := range in.StaticServices {
		write(&in.StaticServices[i], "StaticService", &in.StaticServices[i].Status)
	}
	for i := range in.Dataplanes {
		write(&in.Dataplanes[i], "Dataplane", &in.Dataplanes[i].Status)
	}
	return errors.Join(errs...)
}

// statusOf returns the status of one of the three kinds writeObjectStatuses handles.
func statusOf(obj client.Object) *stnrv1.ObjectStatus {
	switch o := obj.(type) {
	case *stnrv1.GatewayConfig:
		return &o.Status
	case *stnrv1.StaticService:
		return &o.Status
	case *stnrv1.Dataplane:
		return &o.Status
	}
	panic(fmt.Sprintf("statusOf: %T", obj))
}

// validCondition is the Valid condition for an object with problems ps. meta.SetStatusCondition
// keeps the transition time when only the message changes.
func validCondition(ps []render.Problem, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "no problems found", ObservedGeneration: generation}
	var errs, warns []string
	for _, p := range ps {
		line := p.Message
		if p.Field != "" {
			line = p.Field + ": " + p.Message
		}
		if p.Severity == render.SeverityError {
			errs = append(errs, line)
		} else {
			warns = append(warns, line)
		}
	}
	switch {
	case len(errs) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, "Invalid"
		c.Message = strings.Join(append(errs, warns...), "; ")
	case len(warns) > 0:
		c.Message = "warnings: " + strings.Join(warns, "; ")
	}
	if len(c.Message) > maxConditionMessage {
		c.Message = c.Message[:maxConditionMessage-3] + "..."
	}
	return c
}
