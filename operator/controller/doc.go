// Package controller runs Tern's operator: controller-runtime watches on the Gateway API and
// stunner.l7mp.io/v1 resources, and on the Services, EndpointSlices, Secrets, Nodes and
// Namespaces they refer to. Any change re-renders every managed Gateway with operator/render
// from the informer caches, server-side applies each Gateway's ConfigMap, Service and
// Deployment with the Gateway as controlling owner, and writes the status render computed on
// GatewayClasses, Gateways and UDPRoutes.
//
// One reconcile renders everything, as STUNner's operator does, because one object (a
// GatewayConfig, a Secret, an EndpointSlice) can affect any number of Gateways; the work queue
// folds bursts of events into one pending render. Invalid input never fails the reconcile:
// render turns it into conditions naming the problem. Only API errors are retried.
//
// Locks: every mutex of the package guards its own small state (a memo, a map of events, a
// lane's queue) and is a leaf, held neither while another is taken nor across an API call;
// the one exception is Reconciler.publishMu, held while the config discovery store
// (Options.Configs) takes its own lock.
package controller
