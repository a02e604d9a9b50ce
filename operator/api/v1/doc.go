// Package v1 holds the Go types of the stunner.l7mp.io/v1 API that Tern
// accepts unchanged from STUNner: GatewayConfig, UDPRoute, StaticService and
// Dataplane. The CRD manifests in deploy/crds are generated from these types
// and their kubebuilder markers by hack/generate.sh; zz_generated.deepcopy.go
// is generated too and must not be edited. `make generate` (go generate
// ./...) runs the script through the directive below.
//
// +kubebuilder:object:generate=true
// +groupName=stunner.l7mp.io
package v1

//go:generate bash ../../../hack/generate.sh
