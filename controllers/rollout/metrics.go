package rollout

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/machinestate"
)

// The rollout's Prometheus metrics, served on the manager's /metrics.
var (
	machinesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefarm_rollout_machines",
		Help: "Machines of a NodePool by rollout phase: the in-flight phases (Cordoning, Draining, Rebooting, Verifying, Uncordoning), Failed, Pending (waiting to start) and Updated; they sum to the pool's machines, except those neither updated nor waiting (no BootImage yet).",
	}, []string{"namespace", "pool", "phase"})
	unavailableGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefarm_rollout_unavailable_machines",
		Help: "Machines of a NodePool the rollout's budget counts as unavailable (updating, or a node NotReady, cordoned or missing).",
	}, []string{"namespace", "pool"})
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
	metrics.Registry.MustRegister(machinesGauge, unavailableGauge, phaseSeconds, updatesTotal)
}

// observePhase records the time ro spent in the phase it is leaving.
func observePhase(ro *v1alpha1.MachineRollout, now time.Time) {
	phaseSeconds.WithLabelValues(string(ro.Phase)).Observe(now.Sub(ro.PhaseStartTime.Time).Seconds())
}

func observeResult(pool *v1alpha1.NodePool, result v1alpha1.RolloutPhase) {
	updatesTotal.WithLabelValues(pool.Namespace, pool.Name, string(result)).Inc()
}

// inFlightPhases are the phases a machine's update passes through.
var inFlightPhases = []v1alpha1.RolloutPhase{v1alpha1.RolloutCordoning, v1alpha1.RolloutDraining,
	v1alpha1.RolloutRebooting, v1alpha1.RolloutVerifying, v1alpha1.RolloutUncordoning}

// observeMachines sets the pool's gauges from the pass's machines.
func observeMachines(pool *v1alpha1.NodePool, machines []plan.Machine, s plan.Summary) {
	byPhase := map[string]int{"Pending": s.Pending, "Failed": s.Failed, "Updated": s.Updated}
	for _, ph := range inFlightPhases {
		byPhase[string(ph)] = 0
	}
	for _, m := range machines {
		if machinestate.InFlight(m.M) {
			byPhase[string(m.M.Status.Rollout.Phase)]++
		}
	}
	for phase, n := range byPhase {
		machinesGauge.WithLabelValues(pool.Namespace, pool.Name, phase).Set(float64(n))
	}
	unavailableGauge.WithLabelValues(pool.Namespace, pool.Name).Set(float64(s.Unavailable))
}

// forgetPool drops a deleted pool's series.
func forgetPool(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "pool": name}
	machinesGauge.DeletePartialMatch(l)
	unavailableGauge.DeletePartialMatch(l)
	updatesTotal.DeletePartialMatch(l)
}
