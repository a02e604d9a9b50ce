package render

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode reads multi-document YAML (or JSON) manifests into an Input. It
// knows the kinds Input holds; documents of other kinds (a KEDA
// ScaledObject, a Namespace-less fragment, a List's unknown items) are
// returned in ignored as "apiVersion/kind name" rather than failing, so a
// whole application manifest can be fed in. Empty documents are skipped. A
// namespaced object without a namespace lands in "default", as kubectl
// would put it with a default context.
//
// Decoding of a known kind is strict, as the API server's is: an unknown
// field is an error naming the document. Two leniencies match what people
// write: label and annotation values that YAML reads as booleans or numbers
// (stunner.l7mp.io/enable-mixed-protocol-lb: true) are taken as their
// text, and a Secret's stringData is merged into its data.
func Decode(r io.Reader) (in *Input, ignored []string, err error) {
	in = &Input{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for doc := 1; ; doc++ {
		data, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return in, ignored, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(data, &obj); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(obj) == 0 {
			continue
		}
		skipped, err := in.add(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		ignored = append(ignored, skipped...)
	}
}

// add decodes one object (or the items of a List) into in and returns the
// objects of kinds it does not hold.
func (in *Input) add(obj map[string]any) ([]string, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if kind == "List" || (len(kind) > 4 && kind[len(kind)-4:] == "List" && obj["items"] != nil) {
		items, _ := obj["items"].([]any)
		var ignored []string
		for i, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s items[%d]: not an object", kind, i)
			}
			skipped, err := in.add(m)
			if err != nil {
				return nil, fmt.Errorf("%s items[%d]: %w", kind, i, err)
			}
			ignored = append(ignored, skipped...)
		}
		return ignored, nil
	}
	stringifyMeta(obj)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	target := in.target(apiVersion, kind)
	if target == nil {
		return []string{fmt.Sprintf("%s/%s %s", apiVersion, kind, name)}, nil
	}
	if name == "" {
		return nil, fmt.Errorf("%s %s: metadata.name is required", apiVersion, kind)
	}
	// kubectl puts a namespaced object without a namespace into its
	// context's namespace; "default" is the usual one.
	if ns, _ := md["namespace"].(string); ns == "" && !clusterScoped[kind] {
		md["namespace"] = "default"
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if err := strictUnmarshal(data, target()); err != nil {
		return nil, fmt.Errorf("%s %s %q: %w", apiVersion, kind, name, err)
	}
	if kind == "Secret" {
		foldStringData(&in.Secrets[len(in.Secrets)-1])
	}
	return nil, nil
}

// strictUnmarshal decodes like the API server: field names are
// case-sensitive and unknown or duplicate fields are errors.
func strictUnmarshal(data []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(data, v, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// target returns a function that appends a zero object of the given kind to
// in and returns a pointer to it for decoding, or nil for a kind Input does
// not hold.
func (in *Input) target(apiVersion, kind string) func() any {
	switch apiVersion + "/" + kind {
	case "gateway.networking.k8s.io/v1/GatewayClass", "gateway.networking.k8s.io/v1beta1/GatewayClass":
		return func() any { return appendZero(&in.GatewayClasses) }
	case "gateway.networking.k8s.io/v1/Gateway", "gateway.networking.k8s.io/v1beta1/Gateway":
		return func() any { return appendZero(&in.Gateways) }
	case "gateway.networking.k8s.io/v1/UDPRoute", "gateway.networking.k8s.io/v1alpha2/UDPRoute":
		return func() any { return appendZero(&in.GatewayUDPRoutes) }
	case "stunner.l7mp.io/v1/GatewayConfig", "stunner.l7mp.io/v1alpha1/GatewayConfig":
		return func() any { return appendZero(&in.GatewayConfigs) }
	case "stunner.l7mp.io/v1/UDPRoute", "stunner.l7mp.io/v1alpha1/UDPRoute":
		return func() any { return appendZero(&in.UDPRoutes) }
	case "stunner.l7mp.io/v1/StaticService", "stunner.l7mp.io/v1alpha1/StaticService":
		return func() any { return appendZero(&in.StaticServices) }
	case "stunner.l7mp.io/v1/Dataplane", "stunner.l7mp.io/v1alpha1/Dataplane":
		return func() any { return appendZero(&in.Dataplanes) }
	case "v1/Service":
		return func() any { return appendZero(&in.Services) }
	case "v1/Secret":
		return func() any { return appendZero(&in.Secrets) }
	case "v1/Node":
		return func() any { return appendZero(&in.Nodes) }
	case "v1/Namespace":
		return func() any { return appendZero(&in.Namespaces) }
	case "discovery.k8s.io/v1/EndpointSlice":
		return func() any { return appendZero(&in.EndpointSlices) }
	}
	return nil
}

// clusterScoped are the kinds Decode knows that have no namespace.
var clusterScoped = map[string]bool{"GatewayClass": true, "Dataplane": true, "Node": true, "Namespace": true}

func appendZero[T any](s *[]T) *T {
	var zero T
	*s = append(*s, zero)
	return &(*s)[len(*s)-1]
}

// foldStringData merges a Secret's stringData into data, as the API server
// does on write.
func foldStringData(s *corev1.Secret) {
	for k, v := range s.StringData {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// stringifyMeta turns non-string label and annotation values into their
// YAML text, so `key: true` reads as "true".
func stringifyMeta(obj map[string]any) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, field := range []string{"labels", "annotations"} {
		m, ok := md[field].(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			switch v := v.(type) {
			case bool:
				m[k] = strconv.FormatBool(v)
			case float64:
				m[k] = strconv.FormatFloat(v, 'f', -1, 64)
			case int64:
				m[k] = strconv.FormatInt(v, 10)
			}
		}
	}
}
