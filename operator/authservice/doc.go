// Package authservice is Tern's implementation of STUNner's auth service
// (l7mp/stunner-auth-service), which tern-operator serves over HTTP (by
// default on :8088). Application servers ask it for TURN credentials and
// hand them to WebRTC clients:
//
//   - GET /ice returns an RTCConfiguration, {"iceServers": [{"urls",
//     "username", "credential"}], "iceTransportPolicy"}, with one ICE server
//     per selected Gateway: a turn: or turns: URI per listener, at the
//     public address in the Gateway's status.
//   - GET / returns the TURN REST API draft's answer
//     (draft-uberti-behave-turn-rest-00 §2.2), {"username", "password",
//     "ttl", "uris"}, for the first selected Gateway.
//
// With ephemeral auth the credentials are minted from the GatewayConfig's
// shared secret (Mint), for at most the GatewayConfig's authLifetime (a day
// when unset); with static auth they are the GatewayConfig's username and
// password, served only when the Gateway or its GatewayConfig opts in
// (AnnotationServeStatic). Options add a rate limit per client address
// and a bearer token callers must present. The service reads Gateways, GatewayClasses,
// GatewayConfigs, Services and Secrets through a client.Reader (the
// operator's cache) on every request, so it needs no state of its own and
// every operator replica answers, leader or not.
package authservice
