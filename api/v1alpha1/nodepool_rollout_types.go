package v1alpha1

// AlertGate names an alert source and which of its firing alerts hold the
// pool's reboots (docs/rollout.md, "Gates").
type AlertGate struct {
	// Source is the name of one of the manager's --alert-source values (a
	// Prometheus-compatible API: Prometheus, Thanos, Mimir, Alertmanager's
	// Prometheus-compatible proxies). A pool names a source, never an
	// address: the operator decides which servers the manager asks.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Source string `json:"source"`

	// Include is an RE2 pattern an alert's name (its alertname label) must
	// match, as a whole, to hold the pool; empty means every firing alert.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Include string `json:"include,omitempty"`

	// Exclude is an RE2 pattern of alert names that never hold the pool
	// (such as Watchdog, which always fires), matched as a whole.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Exclude string `json:"exclude,omitempty"`
}

// RolloutNotify is where and how the rollout notifies (docs/rollout.md,
// "Notifications").
type RolloutNotify struct {
	// URLSecret names a Secret of the pool's namespace, labelled
	// kubefarm.io/notify-url=true, whose key "url" is the webhook's URL
	// (https or http; a chat webhook's URL is its credential, so it lives
	// in a Secret and is never logged). The label is the Secret owner's
	// consent: without it a pool author could post a message to any URL
	// kept in a Secret of the namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	URLSecret string `json:"urlSecret"`

	// Template is a Go text/template of the message's text, over the
	// fields Event, Namespace, Pool, Machine, Node, Image, Detail and Time;
	// empty is "kubefarm {{.Event}}: {{.Namespace}}/{{.Pool}} machine
	// {{.Machine}} ...". The text is cut at 4,096 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Template string `json:"template,omitempty"`
}
