package tenantcluster

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetTenantClientForTest replaces how the reconciler reaches a tenant API
// server. Call it before the manager starts.
func SetTenantClientForTest(f func(*rest.Config) (client.Client, error)) { newTenantClient = f }

// TenantRESTConfig exposes tenantRESTConfig.
var TenantRESTConfig = tenantRESTConfig
