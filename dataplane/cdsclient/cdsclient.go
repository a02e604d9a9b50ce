// Package cdsclient watches one Gateway's dataplane config from a config
// discovery service (CDS): STUNner's API, served by tern-operator and by
// STUNner's operator on port 13478, as stunnerd watches it
// (`stunnerd -c http://stunner-config-discovery...`).
//
// Watch opens GET /api/v1/configs/{namespace}/{name}?watch=true as a
// WebSocket, hands every text message (one config) to the caller, keeps the
// connection alive with pings, and reconnects with backoff whenever the
// connection fails or the server goes, until its context ends. Configs are
// opaque bytes here; what they mean is the caller's (cmd/ternd).
package cdsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The keepalive, as STUNner's client does it: a ping with payload
// "keepalive" every pingPeriod; a connection that has delivered nothing,
// neither a pong nor a config, for readTimeout is given up and redialled.
// readTimeout is more generous than STUNner's 8 s: a busy operator's late
// pong costs a reconnect, which costs a full config resend.
const (
	pingPeriod   = 5 * time.Second
	readTimeout  = 20 * time.Second
	writeTimeout = 5 * time.Second
)

// Backoff between connection attempts: it starts at MinBackoff, doubles
// after each failed attempt up to MaxBackoff, and starts over once a
// connection delivered a config.
const (
	MinBackoff = 250 * time.Millisecond
	MaxBackoff = 8 * time.Second
)

// WatchURL returns the WebSocket URL that watches the Gateway
// namespace/name at origin, STUNner's config origin: http://host:port,
// ws://host:port, https:// and wss:// (TLS), or a bare host:port, any path
// ignored as stunnerd ignores it. node, when set, is sent as STUNner's
// "node" parameter.
func WatchURL(origin, namespace, name, node string) (string, error) {
	if namespace == "" || name == "" {
		return "", fmt.Errorf("the Gateway's namespace and name are both needed, got %q/%q", namespace, name)
	}
	if !strings.Contains(origin, "://") {
		origin = "http://" + origin
	}
	u, err := url.Parse(origin)
	if err != nil {
		return "", fmt.Errorf("config origin %q: %w", origin, err)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("config origin %q: scheme %q is not http, https, ws or wss", origin, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("config origin %q has no host", origin)
	}
	u.Path = "/api/v1/configs/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	u.RawPath = ""
	q := url.Values{"watch": {"true"}}
	if node != "" {
		q.Set("node", node)
	}
	u.RawQuery = q.Encode()
	u.User, u.Fragment = nil, ""
	return u.String(), nil
}

// Watch watches wsURL (from WatchURL) until ctx ends, calling handle with
// each config message in the order the server sent them, from one
// goroutine. Between connections it waits MinBackoff..MaxBackoff; log (nil
// for none) gets each connect and each failure. It returns ctx's error.
func Watch(ctx context.Context, wsURL string, handle func([]byte), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backoff := MinBackoff
	for {
		delivered, err := watchOnce(ctx, wsURL, handle, log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if delivered {
			backoff = MinBackoff
		}
		log.Warn("config discovery: connection lost; keeping the running config", "url", wsURL, "error", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if !delivered {
			backoff = min(2*backoff, MaxBackoff)
		}
	}
}

// watchOnce runs one connection; delivered says whether a config came.
func watchOnce(ctx context.Context, wsURL string, handle func([]byte), log *slog.Logger) (delivered bool, err error) {
	u, _ := url.Parse(wsURL)
	origin := *u
	origin.Scheme = strings.Replace(origin.Scheme, "ws", "http", 1)
	origin.Path, origin.RawQuery = "", ""
	h := http.Header{}
	h.Set("Origin", origin.String())
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, resp, err := websocket.DefaultDialer.DialContext(dialCtx, wsURL, h)
	cancel()
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (HTTP %s)", err, resp.Status)
		}
		return false, err
	}
	defer conn.Close()
	log.Info("config discovery: connected", "url", wsURL)

	alive := func() { _ = conn.SetReadDeadline(time.Now().Add(readTimeout)) }
	alive()
	conn.SetPongHandler(func(string) error { alive(); return nil })
	stop := make(chan struct{})
	defer close(stop)
	// Closing the connection when ctx ends unblocks the read below.
	go func() {
		t := time.NewTicker(pingPeriod)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				conn.Close()
				return
			case <-t.C:
				if err := conn.WriteControl(websocket.PingMessage, []byte("keepalive"), time.Now().Add(writeTimeout)); err != nil {
					conn.Close()
					return
				}
			}
		}
	}()
	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return delivered, ctx.Err()
			}
			return delivered, err
		}
		alive()
		if typ != websocket.TextMessage {
			return delivered, errors.New("config discovery: the server sent a binary message")
		}
		if len(msg) == 0 {
			continue
		}
		delivered = true
		handle(msg)
	}
}
