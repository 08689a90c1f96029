package events

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// kubefarm-pxe writes Events (core/v1, through client-go's broadcaster,
// which creates and, for aggregated repeats, patches them).
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Component is the source component of kubefarm-pxe's events.
const Component = "kubefarm-pxe"

// StartAPI starts an event broadcaster writing to the API server of cfg and
// returns its recorder and a stop function that flushes and stops it.
// host is the node name shown as the event's source host.
func StartAPI(cfg *rest.Config, scheme *runtime.Scheme, host string) (record.EventRecorder, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("events client: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme, corev1.EventSource{Component: Component, Host: host})
	return rec, b.Shutdown, nil
}
