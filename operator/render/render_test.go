package render

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// minimalInput is one managed class, its GatewayConfig and one Gateway.
func minimalInput() *Input {
	return &Input{
		GatewayClasses: []gwapiv1.GatewayClass{{
			ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: gwapiv1.GatewayClassSpec{
				ControllerName: DefaultControllerName,
				ParametersRef:  &gwapiv1.ParametersReference{Group: stnrv1.GroupName, Kind: "GatewayConfig", Name: "gc", Namespace: ptr(gwapiv1.Namespace("ns"))},
			},
		}},
		GatewayConfigs: []stnrv1.GatewayConfig{{
			ObjectMeta: metav1.ObjectMeta{Name: "gc", Namespace: "ns"},
			Spec:       stnrv1.GatewayConfigSpec{Username: ptr("u"), Password: stnrv1.InlinePassword("p")},
		}},
		Gateways: []gwapiv1.Gateway{{
			ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns"},
			Spec: gwapiv1.GatewaySpec{GatewayClassName: "c", Listeners: []gwapiv1.Listener{
				{Name: "udp", Port: 3478, Protocol: "TURN-UDP"},
			}},
		}},
	}
}

func TestRenderEdges(t *testing.T) {
	tests := []struct {
		name  string
		in    func() *Input
		opts  Options
		check func(t *testing.T, res *Result)
	}{
		{
			name: "empty input",
			in:   func() *Input { return &Input{} },
			check: func(t *testing.T, res *Result) {
				if len(res.Gateways)+len(res.GatewayClasses)+len(res.Routes)+len(res.Problems) != 0 {
					t.Fatalf("want an empty result, got %+v", res)
				}
			},
		},
		{
			name: "standalone leaves the relay address to the config defaults",
			in:   minimalInput,
			opts: Options{Standalone: true},
			check: func(t *testing.T, res *Result) {
				g := res.Gateway("ns", "g")
				if g == nil || g.Config == nil {
					t.Fatalf("not rendered: %v", res.Problems)
				}
				if strings.Contains(g.Config.Relay.Address, "$(") {
					t.Fatalf("relay address %q has a placeholder", g.Config.Relay.Address)
				}
				if g.Deployment != nil {
					t.Fatal("rendered a Deployment without a Dataplane")
				}
			},
		},
		{
			name: "custom controller name claims nothing of STUNner's",
			in:   minimalInput,
			opts: Options{ControllerName: "example.com/other"},
			check: func(t *testing.T, res *Result) {
				if len(res.Gateways) != 0 || len(res.GatewayClasses) != 0 {
					t.Fatalf("claimed %+v", res)
				}
			},
		},
		{
			name: "gateway without listeners is not accepted",
			in: func() *Input {
				in := minimalInput()
				in.Gateways[0].Spec.Listeners = nil
				return in
			},
			check: func(t *testing.T, res *Result) {
				g := res.Gateway("ns", "g")
				if g.Config != nil || g.Status.Conditions[0].Status != metav1.ConditionFalse {
					t.Fatalf("rendered a Gateway without listeners: %+v", g.Status.Conditions)
				}
			},
		},
		{
			name: "route with nil fields everywhere",
			in: func() *Input {
				in := minimalInput()
				in.UDPRoutes = []stnrv1.UDPRoute{{
					ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"},
					Spec: stnrv1.UDPRouteSpec{
						ParentRefs: []gwapiv1.ParentReference{{Name: "g"}},
						Rules:      []stnrv1.UDPRouteRule{{}, {BackendRefs: []stnrv1.BackendRef{{Name: "svc", EndPort: ptr(int32(5))}}}},
					},
				}}
				return in
			},
			check: func(t *testing.T, res *Result) {
				rt := res.Route(stnrv1.GroupName, "ns", "r")
				if rt == nil || len(rt.Parents) != 1 {
					t.Fatalf("route result %+v", rt)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, Render(tt.in(), tt.opts))
		})
	}
}
