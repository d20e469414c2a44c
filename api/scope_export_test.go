package api

import "github.com/gpubroker/gpubroker/store"

// ReadScopesForTest is readScopes: every read route and what a
// tenant-admin sees there.
var ReadScopesForTest = readScopes

// TenantFieldWhoForTest is, from tenantFieldRules, who may change each
// field of a tenant.
func TenantFieldWhoForTest() map[string]string {
	out := map[string]string{}
	for k, v := range tenantFieldRules {
		out[k] = v.who
	}
	return out
}

// RouteRolesForTest is, from routeRoles, the roles each route lets
// through.
func RouteRolesForTest() map[string][]store.Role {
	out := map[string][]store.Role{}
	for k, v := range routeRoles {
		out[k] = v.roles
	}
	return out
}
