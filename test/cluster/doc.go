// Package cluster holds the end-to-end tests that run on a real Kubernetes cluster of one or
// more nodes (hack/cluster.sh). They are behind the "cluster" build tag, so `go test ./...`
// leaves them out; `make cluster-e2e` (which `make test` runs after the Go tests) builds the
// binaries, starts a cluster of three nodes, runs them inside the control plane's network
// namespace (from where every node, pod and Service is reachable) and takes the cluster down:
//
//	hack/cluster-bins.sh && NODES=3 hack/cluster.sh up
//	hack/cluster.sh exec go test -count=1 -tags cluster -v ./test/cluster/
//	hack/cluster.sh down
//
// The tests find the cluster through KUBECONFIG and TERN_CLUSTER_DIR, which `hack/cluster.sh
// exec` sets, and drive it with kubectl (from the cluster's binaries, first on PATH there),
// client-go, Helm's library (the install of deploy/helm/tern) and ctr (each node's containerd).
// The tests that need three nodes skip on fewer, or fail under CI=true. They print the figures
// of BENCHMARKS.md's "Real cluster" section with t.Logf.
package cluster
