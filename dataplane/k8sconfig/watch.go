// Package k8sconfig delivers a dataplane config to a running ternd straight from the
// Kubernetes API: ternd watches the one ConfigMap the operator renders for its Gateway and
// reconfigures itself on every change. Kubelet's ConfigMap volume sync takes up to a minute;
// a watch delivers a change in milliseconds, which is what lets a new media-server endpoint
// become reachable through TURN within about a second.
package k8sconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/kubeclient"
)

// retryPeriod (a variable for tests) is how often the last seen ConfigMap is offered again while applying it keeps
// failing (for example a port that is still held by a draining process). Offers of a config
// that is already applied are dropped without parsing, so this costs nothing in steady state.
var retryPeriod = 10 * time.Second

// Watch follows the ConfigMap namespace/name through the API server and calls apply with the
// config held under key each time a new, valid one appears, the first time included. The
// config is read as the operator renders it (config.Parse): the address placeholders
// $(POD_IP) and $(NODE_IP) take the values of the environment variables POD_IP and NODE_IP,
// which the rendered Deployment sets from the downward API. It uses
// the kubeconfig file at kubeconfig, or when that is "" the usual defaults: $KUBECONFIG,
// ~/.kube/config, then the pod's in-cluster service account.
//
// A config that fails to parse or validate is logged and not applied, so the running config
// stays; so is a ConfigMap without key, or a deleted ConfigMap. A config equal byte for byte to
// the last applied one is not applied again. When apply returns an error the config is offered
// again every few seconds until apply accepts it or a newer config arrives. apply is never
// called concurrently. log may be nil for slog.Default().
//
// Watch blocks until ctx is done and then returns nil. It returns an error at once only if its
// arguments are wrong or no client configuration can be found; API server outages are retried
// with backoff and logged.
func Watch(ctx context.Context, kubeconfig, namespace, name, key string, apply func(*config.Config) error, log *slog.Logger) error {
	if namespace == "" || name == "" || key == "" {
		return fmt.Errorf("k8sconfig: namespace (%q), name (%q) and key (%q) must all be set", namespace, name, key)
	}
	if apply == nil {
		return errors.New("k8sconfig: apply is nil")
	}
	if log == nil {
		log = slog.Default()
	}
	rc, err := kubeclient.RESTConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("k8sconfig: %w", err)
	}
	rc.UserAgent = "ternd"
	cms, err := newConfigMapClient(rc, namespace)
	if err != nil {
		return fmt.Errorf("k8sconfig: client: %w", err)
	}
	w := &watcher{key: key, apply: apply, log: log.With("configmap", namespace+"/"+name, "key", key)}
	w.run(ctx, cms, name)
	return nil
}

// watcher turns ConfigMap events into apply calls. The informer calls its handler from one
// goroutine, so its fields need no lock.
type watcher struct {
	key   string
	apply func(*config.Config) error
	log   *slog.Logger

	last []byte // the data of the last config apply accepted
	bad  []byte // the data of the last config that did not parse, so resyncs log it once
}

// run runs an informer on the single ConfigMap until ctx is done. The field selector keeps
// the watch to that one object, so ternd needs RBAC only for it and sees no other traffic.
func (w *watcher) run(ctx context.Context, cms configMaps, name string) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cms.Watch(ctx, o)
		},
	}
	// client-go reports list/watch failures through logr; route them to the same slog handler.
	logger := logr.FromSlogHandler(w.log.Handler())
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &logger,
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		ResyncPeriod:  retryPeriod,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    w.offer,
			UpdateFunc: func(_, obj any) { w.offer(obj) },
			DeleteFunc: func(any) { w.log.Warn("dataplane ConfigMap deleted; keeping the running config") },
		},
	})
	ctrl.RunWithContext(ctx)
}

// offer applies the config in a ConfigMap event if it is new and valid.
func (w *watcher) offer(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	data, ok := configData(cm, w.key)
	if !ok {
		w.log.Warn("dataplane ConfigMap has no config under its key; keeping the running config",
			"resourceVersion", cm.ResourceVersion)
		return
	}
	if w.last != nil && bytes.Equal(data, w.last) {
		return
	}
	if w.bad != nil && bytes.Equal(data, w.bad) {
		return
	}
	c, err := config.Parse(data, os.Getenv)
	if err != nil {
		w.bad = data
		w.log.Error("invalid dataplane config; keeping the running config",
			"resourceVersion", cm.ResourceVersion, "err", err)
		return
	}
	if err := w.apply(c); err != nil {
		w.log.Error("applying dataplane config failed; will retry",
			"resourceVersion", cm.ResourceVersion, "err", err)
		return
	}
	w.last = data
	w.log.Info("applied dataplane config", "resourceVersion", cm.ResourceVersion)
}

// configData returns the config under key, from data or, failing that, binaryData.
func configData(cm *corev1.ConfigMap, key string) ([]byte, bool) {
	if s, ok := cm.Data[key]; ok {
		return []byte(s), true
	}
	b, ok := cm.BinaryData[key]
	return b, ok
}
