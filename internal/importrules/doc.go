// Package importrules holds no code, only a test that enforces which packages may depend on
// which, so that the layering the design relies on cannot erode one import at a time:
//
//   - turn/ is the TURN engine: it depends on nothing of the dataplane, the operator or
//     Kubernetes, so it can be tested and benchmarked alone.
//   - dataplane/ (ternd's packages) depends on neither the operator nor the Gateway API nor
//     controller-runtime; dataplane/config is the one contract between operator and dataplane,
//     and client-go (dataplane/k8sconfig, internal/kubeclient) is all of Kubernetes it needs.
//   - dataplane/config, the contract, and its leaf packages (endpoint, loglevel, placeholder, protocol) use
//     no other package of the module and nothing of the Kubernetes API, so both sides can link
//     them without the other's dependencies.
//   - cmd/tern-operator uses no dataplane package but dataplane/config and its leaf packages.
//
// The rules apply to the packages a binary links, not to tests: operator tests may run the
// dataplane's side of config delivery, and dataplane tests may start an API server.
package importrules
