package render

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// classState is a managed GatewayClass with its GatewayConfig resolved.
type classState struct {
	class    *gwapiv1.GatewayClass
	config   *stnrv1.GatewayConfig // nil when not accepted
	problems []Problem
}

func (c *classState) accepted() bool { return c.config != nil }

func (c *classState) result() GatewayClassResult {
	res := GatewayClassResult{Name: c.class.Name}
	gen := c.class.Generation
	if c.accepted() {
		ref := gatewayConfigRef(c.config)
		res.GatewayConfig = &ref
		res.Conditions = []metav1.Condition{condition(string(gwapiv1.GatewayClassConditionStatusAccepted), true,
			string(gwapiv1.GatewayClassReasonAccepted), fmt.Sprintf("GatewayConfig %s/%s", c.config.Namespace, c.config.Name), gen)}
		return res
	}
	res.Conditions = []metav1.Condition{condition(string(gwapiv1.GatewayClassConditionStatusAccepted), false,
		string(gwapiv1.GatewayClassReasonInvalidParameters), joinMessages(c.problems), gen)}
	return res
}

func classRef(gc *gwapiv1.GatewayClass) ObjectRef {
	return ObjectRef{Group: gwapiv1.GroupName, Kind: "GatewayClass", Name: gc.Name}
}

func gatewayConfigRef(c *stnrv1.GatewayConfig) ObjectRef {
	return ObjectRef{Group: stnrv1.GroupName, Kind: "GatewayConfig", Namespace: c.Namespace, Name: c.Name}
}

// resolveClass finds the GatewayConfig a managed class's parametersRef
// names. The reference's rules: the ref is required, its group and kind
// may only be stunner.l7mp.io and GatewayConfig, and a hierarchy holds at
// most one GatewayConfig, so a ref without a namespace that matches
// GatewayConfigs in several namespaces is an error rather than a guess.
func (r *renderer) resolveClass(gc *gwapiv1.GatewayClass) *classState {
	cs := &classState{class: gc}
	ref := classRef(gc)
	fail := func(field, format string, args ...any) *classState {
		cs.problems = append(cs.problems, r.problems.errorf(ref, field, format, args...))
		return cs
	}
	p := gc.Spec.ParametersRef
	if p == nil {
		return fail("spec.parametersRef", "a GatewayConfig is required: without one the TURN credentials cannot be known")
	}
	if p.Group != "" && string(p.Group) != stnrv1.GroupName {
		return fail("spec.parametersRef.group", "must be %s, got %q", stnrv1.GroupName, p.Group)
	}
	if p.Kind != "" && p.Kind != "GatewayConfig" {
		return fail("spec.parametersRef.kind", "must be GatewayConfig, got %q", p.Kind)
	}
	candidates := r.gatewayConfigs[p.Name]
	if p.Namespace != nil && *p.Namespace != "" {
		var inNS []*stnrv1.GatewayConfig
		for _, c := range candidates {
			if c.Namespace == string(*p.Namespace) {
				inNS = append(inNS, c)
			}
		}
		candidates = inNS
	}
	switch len(candidates) {
	case 0:
		if p.Namespace != nil && *p.Namespace != "" {
			return fail("spec.parametersRef", "GatewayConfig %s/%s not found", *p.Namespace, p.Name)
		}
		return fail("spec.parametersRef", "GatewayConfig %q not found", p.Name)
	case 1:
		cs.config = candidates[0]
		return cs
	}
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = nsName(c.Namespace, c.Name)
	}
	sort.Strings(names)
	return fail("spec.parametersRef.namespace", "two GatewayConfigs in one hierarchy: %q matches %v; set the namespace", p.Name, names)
}

// gatewayConfigFor returns the GatewayConfig a Gateway uses: its class's.
// A Gateway's own spec.infrastructure.parametersRef may name the same
// GatewayConfig; naming another puts two GatewayConfigs in one hierarchy,
// which is an error.
func (r *renderer) gatewayConfigFor(gw *gwapiv1.Gateway, cs *classState, ps *[]Problem) *stnrv1.GatewayConfig {
	ref := gatewayRef(gw)
	if !cs.accepted() {
		*ps = append(*ps, r.problems.errorf(ref, "spec.gatewayClassName",
			"GatewayClass %s is not accepted: %s", cs.class.Name, joinMessages(cs.problems)))
		return nil
	}
	if gw.Spec.Infrastructure != nil && gw.Spec.Infrastructure.ParametersRef != nil {
		p := gw.Spec.Infrastructure.ParametersRef
		if string(p.Group) == stnrv1.GroupName && p.Kind == "GatewayConfig" &&
			(p.Name != cs.config.Name || gw.Namespace != cs.config.Namespace) {
			*ps = append(*ps, r.problems.errorf(ref, "spec.infrastructure.parametersRef",
				"two GatewayConfigs in one hierarchy: GatewayClass %s uses %s/%s, this names %s/%s",
				cs.class.Name, cs.config.Namespace, cs.config.Name, gw.Namespace, p.Name))
			return nil
		}
	}
	return cs.config
}
