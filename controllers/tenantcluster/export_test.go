package tenantcluster

// TenantRESTConfig exposes tenantRESTConfig.
var TenantRESTConfig = tenantRESTConfig
