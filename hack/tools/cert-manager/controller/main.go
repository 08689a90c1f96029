// Command controller runs cert-manager's certificate and CA/self-signed issuer
// controllers, assembled from cert-manager's own pkg/controller packages at the
// version pinned in go.mod. It exists because cert-manager's command module is
// not reachable through the module proxy; the controllers themselves are
// upstream code, unchanged.
//
// Only the controllers kubefarm relies on are linked in: Certificates
// (trigger, key-manager, request-manager, issuing, readiness, revision
// manager), Issuers, ClusterIssuers, and CertificateRequests for the approver,
// CA and self-signed issuers. ACME, Vault and Venafi are left out on purpose.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster configuration")
	namespace := flag.String("namespace", "", "namespace to watch; empty means all namespaces")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace that holds the Secrets referenced by ClusterIssuers")
	workers := flag.Int("workers", 5, "workers per controller")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log)

	if err := run(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		Namespace:          *namespace,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: *clusterResourceNamespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Minute,
			CertificateRequestMaximumBackoffDuration: 10 * time.Minute,
		},
	}, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts controllerpkg.ContextOptions, workers int) error {
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}

	names := make([]string, 0, len(controllerpkg.Known()))
	for name := range controllerpkg.Known() {
		names = append(names, name)
	}
	sort.Strings(names)

	controllers := make(map[string]controllerpkg.Interface, len(names))
	for _, name := range names {
		c, err := controllerpkg.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		controllers[name] = c
	}

	// Informers are requested while the controllers are constructed; they
	// only start once the factories are started, after every controller has
	// registered what it watches.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	fmt.Fprintf(os.Stderr, "cert-manager controller: running %v\n", names)

	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		wg.Add(1)
		go func(name string, c controllerpkg.Interface) {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
			}
		}(name, controllers[name])
	}
	wg.Wait()
	close(errs)
	return <-errs
}
