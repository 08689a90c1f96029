package rollout

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

// The rollout's Prometheus metrics, served on the manager's /metrics.
var (
	machinesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefarm_rollout_machines",
		Help: "Machines of a NodePool by rollout state: updating, pending, failed, updated, unavailable.",
	}, []string{"namespace", "pool", "state"})
	phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubefarm_rollout_phase_duration_seconds",
		Help:    "Time machines spent in each rollout phase.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600},
	}, []string{"phase"})
	updatesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubefarm_rollout_updates_total",
		Help: "Finished machine updates by result (Done, Failed, Skipped).",
	}, []string{"namespace", "pool", "result"})
)

func init() {
	metrics.Registry.MustRegister(machinesGauge, phaseSeconds, updatesTotal)
}

// observePhase records the time ro spent in the phase it is leaving.
func observePhase(_ *v1alpha1.NodePool, ro *v1alpha1.MachineRollout, now time.Time) {
	phaseSeconds.WithLabelValues(string(ro.Phase)).Observe(now.Sub(ro.PhaseStartTime.Time).Seconds())
}

func observeResult(pool *v1alpha1.NodePool, result v1alpha1.RolloutPhase) {
	updatesTotal.WithLabelValues(pool.Namespace, pool.Name, string(result)).Inc()
}

func observeMachines(pool *v1alpha1.NodePool, s plan.Summary) {
	for state, n := range map[string]int{"updating": s.InFlight, "pending": s.Pending, "failed": s.Failed,
		"updated": s.Updated, "unavailable": s.Unavailable} {
		machinesGauge.WithLabelValues(pool.Namespace, pool.Name, state).Set(float64(n))
	}
}
