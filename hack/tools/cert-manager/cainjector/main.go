// Command cainjector runs cert-manager's CA injector, assembled from
// cert-manager's own pkg/controller/cainjector at the version pinned in
// go.mod: it copies the CA of a Certificate into webhook configurations and
// CRDs annotated with cert-manager.io/inject-ca-from.
package main

import (
	"flag"
	"fmt"
	"os"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	namespace := flag.String("namespace", "", "only inject CAs from Certificates and Secrets in this namespace; empty means all")
	leaderElect := flag.Bool("leader-elect", false, "elect a leader among replicas")
	leaderNS := flag.String("leader-election-namespace", "kube-system", "namespace of the leader election Lease")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(*namespace, *leaderElect, *leaderNS); err != nil {
		fmt.Fprintln(os.Stderr, "cainjector:", err)
		os.Exit(1)
	}
}

func run(namespace string, leaderElect bool, leaderNS string) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, cmscheme.AddToScheme, apiextensionsv1.AddToScheme, apiregistrationv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// cainjector names its server-side-apply field manager after the user
	// agent's product; without one every apply is rejected.
	cfg.UserAgent = "cert-manager-cainjector"
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaderElection:          leaderElect,
		LeaderElectionID:        "cert-manager-cainjector-leader-election",
		LeaderElectionNamespace: leaderNS,
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			// The keys are cainjector's resource names; API services are
			// left out because nothing kubefarm installs is aggregated.
			"mutatingwebhookconfiguration":   true,
			"validatingwebhookconfiguration": true,
			"customresourcedefinition":       true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
