package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/httplimit"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// noMachines is the Machines of the benchmark's handler: the artifact route
// consults it only to record events (off here; one index lookup per whole
// download when on), and every script or config request answers 404/403.
type noMachines struct{}

func (noMachines) ByIP(string) (*kubefarmv1.Machine, bool)          { return nil, false }
func (noMachines) ByMAC(string) (*kubefarmv1.Machine, bool)         { return nil, false }
func (noMachines) BootImage(string) (*kubefarmv1.BootImage, bool)   { return nil, false }
func (noMachines) Pool(string, string) (*kubefarmv1.NodePool, bool) { return nil, false }

// serve runs kubefarm-pxe's TFTP server and HTTP handler as a process of
// its own, built with the constructors and the defaults cmd/kubefarm-pxe
// uses (tftp.NewServer with its flag defaults and metrics, httpboot.NewStore,
// httpboot.NewHandler with metrics, an http.Server with the same limits
// behind the same pxe/httplimit listener and deadline wrapper, the zap
// logger at info). Only the informer-backed Machines is replaced: the
// measured route, GET /artifacts/sha256:<hex>, reads the Store and never
// the API. The listener caps nothing here: every client of the bench is
// 127.0.0.1, up to 100 at once; it is there so that the measured path goes
// through its connection wrapper (and so sendfile through its ReadFrom).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	tftpAddr := fs.String("tftp-addr", "127.0.0.1:0", "TFTP listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:0", "HTTP listen address")
	ipxeDir := fs.String("ipxe-dir", tftp.DefaultDir, "directory of the TFTP files")
	cacheDir := fs.String("cache-dir", "", "artifact cache directory (pre-warmed)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server here")
	_ = fs.Parse(args)

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	log := zap.New(zap.UseFlagOptions(&zap.Options{})).WithName("kubefarm-pxe")
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: *cacheDir, MaxSize: 4 << 30})
	if err != nil {
		return err
	}
	defer store.Close()
	handler, tftpSrv, err := newServers(store, *ipxeDir, *httpAddr, reg, log)
	if err != nil {
		return err
	}

	rawLn, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	httpLn := httplimit.NewListener(rawLn, 0)
	tftpConn, err := tftp.Listen(*tftpAddr)
	if err != nil {
		return fmt.Errorf("tftp: %w", err)
	}
	return serveUntilStopped(handler, httpLn, tftpSrv, tftpConn, log)
}

// newServers builds the HTTP handler over store and the TFTP server of
// ipxeDir as kubefarm-pxe configures them, with their metrics in reg.
func newServers(store *httpboot.Store, ipxeDir, httpAddr string, reg *prometheus.Registry, log logr.Logger) (*httpboot.Handler, *tftp.Server, error) {
	hm, err := httpboot.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	_, port, _ := net.SplitHostPort(httpAddr)
	handler, err := httpboot.NewHandler(httpboot.Config{
		BaseURL:       "http://127.0.0.1:" + port,
		IPXEDir:       ipxeDir,
		EnsureTimeout: 2 * time.Minute,
		Windows:       httpboot.NewBootWindows(10*time.Minute, nil),
		Ready:         func() bool { return true },
	}, noMachines{}, store, hm, reg, log.WithName("http"))
	if err != nil {
		return nil, nil, err
	}
	tm, err := tftp.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	tftpSrv, err := tftp.NewServer(tftp.Config{
		Dir: ipxeDir, Timeout: 2 * time.Second, Retries: 5, MaxTransfers: 64,
	}, tm, log.WithName("tftp"))
	if err != nil {
		return nil, nil, err
	}
	return handler, tftpSrv, nil
}

// serveUntilStopped serves HTTP on httpLn and TFTP on tftpConn until a
// signal or the first server error, then shuts both down.
func serveUntilStopped(handler http.Handler, httpLn net.Listener, tftpSrv *tftp.Server, tftpConn net.PacketConn, log logr.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Artifacts get no deadlines in kubefarm-pxe either (routeDeadlines).
	noDeadlines := func(*http.Request) httplimit.Deadlines { return httplimit.Deadlines{} }
	srv := &http.Server{Handler: httplimit.Handler(handler, noDeadlines), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 8 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := tftpSrv.Serve(ctx, tftpConn); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("tftp: %w", err)
		}
	}()
	log.Info("serving", "http", httpLn.Addr().String(), "tftp", tftpConn.LocalAddr().String())
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	stop()
	wg.Wait()
	return runErr
}
