// Package tenantcache is the manager's one way into the tenant clusters, in
// the manner of Cluster API's clustercache: per TenantCluster whose control
// plane the manager can reach, one connection made from its internal admin
// kubeconfig Secret (credential.RESTConfig: the embedded server, CA and
// client certificate only), the clients made from it, and SHARED informers
// of the tenant's Nodes and kubelet CertificateSigningRequests, with one
// lifecycle:
//
//   - started on first use (a caller asking for the tenant) or when the
//     credential Secret appears, whichever comes first;
//   - stopped when the TenantCluster goes (or is being deleted) or its
//     Secret does, and restarted when the credential in it changes, the old
//     connection's every goroutine returned before the new one starts;
//   - health-checked: a probe of the API server's /readyz when the
//     connection starts, every HealthInterval, and at once when a list of
//     one of its informers fails; with a growing backoff while it does not
//     answer. Callers of an unhealthy tenant get an error naming the
//     TenantCluster instead of a request that hangs;
//   - all stopped with the manager (a Runnable that needs leader election,
//     since only the leader acts in the tenants).
//
// The controllers that act inside every tenant (csrapproval, machinenode)
// register a Watch: which shared informers feed their per-tenant queue of
// keys and how one key is handled. The cache runs one queue and one worker
// per tenant and Watch (watch.go), so a slow or unreachable tenant holds up
// only its own keys. The rollout reads a tenant's Nodes from the shared
// Node informer (Nodes) instead of listing them on every pass.
//
// The TenantCluster controller's add-ons use another identity (the
// super-admin, the only one with rights before kubefarm's bindings exist
// in the tenant), so they keep their clients in a Clients store, the same
// credential-keyed store the cache's connections are.
package tenantcache
