package server

// New's steps, in the order the services depend on each other: the cache
// and the inventory, the API clients, the artifact store, the Events, the
// HTTP handler.

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/inventory"
)

// newCache makes the informer cache and the inventory of Machines.
// Informers are registered before the cache starts. The Machines,
// thousands of them on every replica, are not in the cache: the inventory
// keeps one compact record of each, fed by its own reflector.
func (s *Server) newCache(ctx context.Context) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	s.scheme = scheme
	if s.cache, err = cache.New(s.cfg, s.opts.cacheOptions(scheme)); err != nil {
		return fmt.Errorf("creating the cache: %w", err)
	}
	if s.inv, err = inventory.New(ctx, s.cache, s.log.WithName("inventory")); err != nil {
		return err
	}
	if err := s.inv.Register(s.reg); err != nil {
		return err
	}
	if s.machines, err = httpboot.NewCacheMachines(ctx, s.cache, s.inv, s.log.WithName("machines")); err != nil {
		return err
	}
	if s.watcher, err = client.NewWithWatch(s.cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("creating the Machines' watch client: %w", err)
	}
	return nil
}

// newClients makes the join token issuer, the API writer and the dynamic
// lease allocator.
func (s *Server) newClients(ctx context.Context) error {
	issuer, err := joinTokens(ctx, s.cache, s.opts, s.log)
	if err != nil {
		return err
	}
	// Interfaces are set only with an issuer: a nil *Issuer in one would
	// not compare equal to nil, and /config would call it.
	if issuer != nil {
		s.tokens, s.tenants = issuer, issuer
	}
	// Writes go straight to the API server: /report's status patch,
	// dynamic leases, nothing else.
	if s.writer, err = client.New(s.cfg, client.Options{Scheme: s.scheme}); err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	if s.opts.DynamicRanges {
		// Registered before the cache starts (its indexes), so the
		// DHCPLeases are part of the sync that makes the replica ready.
		s.allocator, err = dynamic.New(ctx, dynamic.Config{Cache: s.cache, Client: s.writer, APIReader: s.writer, Static: s.inv})
		if err != nil {
			return err
		}
	}
	return nil
}

// newStore makes the artifact cache, whose guard refuses the API server's
// addresses, resolved now.
func (s *Server) newStore(ctx context.Context) error {
	storeCfg, err := s.opts.storeConfig(ctx, s.cfg.Host)
	if err != nil {
		return err
	}
	if s.store, err = httpboot.NewStore(storeCfg); err != nil {
		return fmt.Errorf("artifact cache: %w", err)
	}
	return nil
}

// newEvents makes one broadcaster (one client, one bounded queue) for
// every Event this replica writes: Machines' boot stages and BootImages'
// checks; then the sink of the former and the controller of the latter.
func (s *Server) newEvents(ctx context.Context) error {
	var recorder record.EventRecorder
	if s.opts.EventInterval > 0 || s.opts.VerifyImages || s.opts.Discovery {
		rec, stopEvents, err := events.StartAPI(s.cfg, s.scheme, s.opts.NodeName)
		if err != nil {
			return err
		}
		s.stopEvents = stopEvents
		recorder = rec
	}
	var err error
	if s.eventSink, err = machineEvents(recorder, s.inv, s.opts, s.reg, s.log.WithName("events")); err != nil {
		return err
	}
	if s.imageCheck, err = bootImageCheck(recorder, s.cache, s.writer, s.store, s.opts, s.log); err != nil {
		return err
	}
	s.discovery, err = discovery(ctx, s.cache, s.writer, recorder, s.opts, s.reg, s.log)
	return err
}

// newHandler makes the HTTP boot service's handler and the boot windows
// it shares with DHCP.
func (s *Server) newHandler(context.Context) error {
	hm, err := httpboot.NewMetrics(s.reg)
	if err != nil {
		return err
	}
	// The boots in progress: DHCP arms them, HTTP issues their secrets.
	s.windows = httpboot.NewBootWindows(s.opts.BootWindow, nil)
	s.handler, err = httpboot.NewHandler(httpboot.Config{
		BaseURL:       s.boot.base.String(),
		IPXEDir:       s.opts.IPXEDir,
		EnsureTimeout: s.opts.ArtifactWait,
		Windows:       s.windows,
		Recorder:      httpboot.StatusRecorder{Client: s.writer},
		Events:        s.eventSink,
		// A tenant without a credential (not ready yet, or written into
		// another namespace) makes Issue fail: /config answers 503 to the
		// machine, which retries, and logs which Secret is missing.
		Tokens: s.tokens,
		// The tenant's endpoint, CA and DNS for the agent come from the
		// same Secret as the credential (bootstraptoken.KeyNodeFacts).
		Tenants: s.tenants,
		Ready:   s.isReady,
		// Discovery and the Join pools' wait need the leases of the
		// catch-all ranges.
		Leases:    s.leases(),
		Discovery: s.discovery,
	}, s.machines, s.store, hm, s.reg, s.log.WithName("http"))
	return err
}

// isReady says whether the cache and the inventory have synced.
func (s *Server) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// leases are the allocator's lookups; nil (not a nil *Allocator) without
// --dynamic-ranges.
func (s *Server) leases() httpboot.DynamicLeases {
	if s.allocator == nil {
		return nil
	}
	return s.allocator
}
