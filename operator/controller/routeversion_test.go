package controller

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1a2 "sigs.k8s.io/gateway-api/apis/v1alpha2"
)

func TestDiscoverRouteVersion(t *testing.T) {
	tests := []struct {
		name   string
		served []string // UDPRoute versions of gateway.networking.k8s.io the cluster serves
		want   string   // "" for none
	}{
		{"standard channel 1.5+", []string{"v1"}, "v1"},
		{"experimental channel", []string{"v1", "v1alpha2"}, "v1"},
		{"older Gateway API", []string{"v1alpha2"}, "v1alpha2"},
		{"no UDPRoute", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gvs []schema.GroupVersion
			for _, v := range tt.served {
				gvs = append(gvs, schema.GroupVersion{Group: gwapiv1.GroupName, Version: v})
			}
			m := meta.NewDefaultRESTMapper(gvs)
			for _, gv := range gvs {
				m.Add(gv.WithKind("UDPRoute"), meta.RESTScopeNamespace)
			}
			rv, err := discoverRouteVersion(m)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if rv != nil {
				got = rv.version
			}
			if got != tt.want {
				t.Errorf("version %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUDPRouteV1(t *testing.T) {
	port := gwapiv1.PortNumber(1)
	in := &gwapiv1a2.UDPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "stunner", Name: "media-plane-route", Generation: 3},
		Spec: gwapiv1a2.UDPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Name: "udp-gateway"}}},
			Rules: []gwapiv1a2.UDPRouteRule{{BackendRefs: []gwapiv1.BackendRef{{
				BackendObjectReference: gwapiv1.BackendObjectReference{Name: "media-server-pool", Port: &port},
			}}}},
		},
	}
	out := udpRouteV1(in)
	if out.Name != in.Name || out.Namespace != in.Namespace || out.Generation != 3 {
		t.Errorf("metadata %+v not carried over", out.ObjectMeta)
	}
	if !reflect.DeepEqual(out.Spec.ParentRefs, in.Spec.ParentRefs) {
		t.Errorf("parentRefs %+v, want %+v", out.Spec.ParentRefs, in.Spec.ParentRefs)
	}
	if len(out.Spec.Rules) != 1 || !reflect.DeepEqual(out.Spec.Rules[0].BackendRefs, in.Spec.Rules[0].BackendRefs) {
		t.Errorf("rules %+v, want %+v", out.Spec.Rules, in.Spec.Rules)
	}
	if gvk := out.GroupVersionKind(); gvk.Version != "v1" || gvk.Kind != "UDPRoute" {
		t.Errorf("GVK %v, want v1 UDPRoute", gvk)
	}
	in.Spec.Rules[0].BackendRefs[0].Name = "changed"
	if out.Spec.Rules[0].BackendRefs[0].Name != "media-server-pool" {
		t.Error("the conversion shares memory with its input")
	}
}
