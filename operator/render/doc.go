// Package render turns a set of Gateway API and stunner.l7mp.io/v1 objects
// into, per Gateway, the dataplane config ternd loads and the Kubernetes
// objects that run it: a ConfigMap, a Secret with the credentials, a
// Deployment, a Service, and the ServiceAccount, Role and RoleBinding that
// let the pods read the ConfigMap through the API. The objects are complete, labels and owner reference
// included, so what `tern-operator render` prints is what the controller
// applies. It also says what status the controller should write and which
// problems it found.
//
// Render is a pure function: it reads only its Input, talks to no API
// server and never panics on invalid objects; an invalid object yields a
// Problem naming the offending field. The controller lists the objects,
// calls Render, and applies the result; `tern-operator render` and
// `ternd -f` call it on objects decoded from YAML files.
//
// # Conventions between the rendered objects and ternd
//
// Config file: the ConfigMap (named after the Gateway) holds the config
// under the key ConfigKey; the Deployment mounts it at ConfigDir, so ternd
// reads ConfigPath, passed with "-c" unless the Dataplane's args name a
// config already. The env var TERN_CONFIGMAP names the ConfigMap (in the
// pod's namespace, POD_NAMESPACE) for dataplanes that watch it through the
// API instead of the file.
//
// Addresses known only at run time: a pod's IP is not known when the config
// is rendered, so address fields of the config may hold a placeholder,
// placeholder.PodIP or placeholder.NodeIP, which the dataplane
// replaces with its POD_IP and NODE_IP environment variables (filled by the
// Deployment from the downward API: status.podIP and status.hostIP) before
// validating the config. This package only produces placeholders; reading
// them is config.Parse's job, the same Parse Render checks every rendered
// config with. The relay address is $(POD_IP); with hostNetwork it is
// $(NODE_IP), the node's own address, which is the pod's address too in
// that case. Only whole field values are replaced, so passwords containing
// "$(" are never touched.
//
// Alternates (the ALTERNATE-SERVER redirect targets, RFC 8489 §10): with
// hostNetwork the config lists every ready replica of the Gateway at its
// node's client-facing address with port 0, from the EndpointSlices of the
// Gateway's own Service (replicaAlternates); the same list goes to every
// replica, each of which leaves itself out. On the pod network the replicas
// share the Service's address and none are listed.
//
// Credentials: the password or shared secret is never in the ConfigMap. It
// goes to the Secret CredentialsSecretName (key CredentialsKeyPassword or
// CredentialsKeySharedSecret), which the Deployment mounts at
// CredentialsDir; the config's auth.passwordFile or auth.sharedSecretFile
// names the file, and ternd reads it and re-reads it when kubelet updates
// the volume. Standalone rendering keeps them inline (nothing is applied).
//
// TLS: a TURN-TLS or TURN-DTLS listener's certificateRef must name a Secret
// in the Gateway's namespace (a pod can mount no other) with keys tls.crt
// and tls.key. The Deployment mounts each such Secret read-only at
// TLSDir/<secret name>/, and the listener's cert and key are the files
// tls.crt and tls.key there. Kubelet updates the files when the Secret
// changes; the dataplane restarts only that listener.
package render
