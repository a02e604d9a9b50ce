package render

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// goldenInputs decodes every golden case's input.
func goldenInputs(t *testing.T) map[string]*Input {
	t.Helper()
	paths, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	out := map[string]*Input{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		in, _, err := Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("decode %s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".in.yaml")] = in
	}
	return out
}

func gatewayYAML(t *testing.T, g *GatewayResult) string {
	t.Helper()
	b, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenderOneGateway: for every golden case, rendering an Input that holds one Gateway (and
// every other object) gives that Gateway the result the full Render gives it, so that a
// controller may render only the Gateways a change touches.
func TestRenderOneGateway(t *testing.T) {
	for name, in := range goldenInputs(t) {
		full := Render(in, Options{})
		for i := range full.Gateways {
			want := &full.Gateways[i]
			sub := *in
			sub.Gateways = nil
			for _, gw := range in.Gateways {
				if gw.Namespace == want.Namespace && gw.Name == want.Name {
					sub.Gateways = append(sub.Gateways, gw)
				}
			}
			part := Render(&sub, Options{})
			if len(part.Gateways) != 1 {
				t.Errorf("%s: Gateway %s/%s alone: %d results, want 1", name, want.Namespace, want.Name, len(part.Gateways))
				continue
			}
			if w, g := gatewayYAML(t, want), gatewayYAML(t, &part.Gateways[0]); w != g {
				t.Errorf("%s: Gateway %s/%s rendered alone differs from the full render:\n%s", name, want.Namespace, want.Name, lineDiff(w, g))
			}
		}
	}
}

// TestSliceGateways: for every golden case and every Service and EndpointSlice in it, a
// change of the Service's slices (an endpoint added to a slice, a slice deleted, a slice added
// to a Service that had none) changes the result of no Gateway SliceGateways does not name.
func TestSliceGateways(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr(true)}
	added := map[discoveryv1.AddressType]string{discoveryv1.AddressTypeIPv4: "10.254.254.9",
		discoveryv1.AddressTypeIPv6: "fd00::fe:9", discoveryv1.AddressTypeFQDN: "added.example.com"}
	checked := 0
	for name, in := range goldenInputs(t) {
		before := Render(in, Options{})
		check := func(what, ns, svc string, changed *Input) {
			t.Helper()
			checked++
			after := Render(changed, Options{})
			names := SliceGateways(in, ns, svc)
			for i := range after.Gateways {
				g := &after.Gateways[i]
				old := before.Gateway(g.Namespace, g.Name)
				if old != nil && gatewayYAML(t, old) == gatewayYAML(t, g) {
					continue
				}
				if !slices.Contains(names, GatewayName{Namespace: g.Namespace, Name: g.Name}) {
					t.Errorf("%s: %s of Service %s/%s changed Gateway %s/%s, which SliceGateways (%v) leaves out",
						name, what, ns, svc, g.Namespace, g.Name, names)
				}
			}
		}
		for i, s := range in.EndpointSlices {
			svc := s.Labels[discoveryv1.LabelServiceName]
			if svc == "" {
				continue
			}
			grown := *in
			grown.EndpointSlices = slices.Clone(in.EndpointSlices)
			es := s.DeepCopy()
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{added[es.AddressType]}, Conditions: ready})
			grown.EndpointSlices[i] = *es
			check("an endpoint added to "+s.Name, s.Namespace, svc, &grown)

			gone := *in
			gone.EndpointSlices = slices.Delete(slices.Clone(in.EndpointSlices), i, i+1)
			check("slice "+s.Name+" deleted", s.Namespace, svc, &gone)
		}
		for _, svc := range in.Services {
			for _, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
				more := *in
				more.EndpointSlices = append(slices.Clone(in.EndpointSlices), discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-added",
						Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
					AddressType: family,
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{added[family]}, Conditions: ready, NodeName: nodeOf(in)}},
					Ports:       []discoveryv1.EndpointPort{{Port: ptr(int32(3478)), Protocol: ptr(corev1.ProtocolUDP)}},
				})
				check("a new "+string(family)+" slice", svc.Namespace, svc.Name, &more)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no EndpointSlice or Service in the golden cases")
	}
}

// nodeOf names a Node of in, so that an added endpoint can be an alternate (on a node with an
// address), or nil.
func nodeOf(in *Input) *string {
	if len(in.Nodes) == 0 {
		return nil
	}
	return &in.Nodes[0].Name
}
