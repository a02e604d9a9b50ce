// Package cds is tern-operator's config discovery service (CDS): STUNner's
// API on port 13478 (its OpenAPI description, pkg/config/api/
// stunner_openapi.yaml in l7mp/stunner) from which stunnerd, stunnerctl,
// turncat and ternd get the dataplane config of each Gateway, listed, got
// or watched over a WebSocket.
//
// The configs are opaque bytes here: the operator's render produces them
// (render.GatewayResult.CDSConfig, STUNner's v1 JSON with Tern's document
// beside it) and hands the state of the world to Store.Update after every
// render; Handler serves the store. The package imports nothing else of
// Tern.
package cds
