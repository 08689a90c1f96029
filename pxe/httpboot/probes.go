package httpboot

import "net/http"

// Probes serves /healthz (200 once Config.Ready says so, 503 before) and
// /metrics (the gatherer given to NewHandler) for the kubelet and
// Prometheus. It is served on a listener of its own, never on the boot
// network's: the boot handler answers neither path (404), so a host on the
// boot network can neither read the replica's metrics (the counts of every
// route, Machine and lease) nor tell when it is ready.
func (h *Handler) Probes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.healthz)
	if h.metricsH != nil {
		mux.Handle("GET /metrics", h.metricsH)
	}
	return mux
}
