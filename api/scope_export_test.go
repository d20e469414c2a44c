package api

// ReadScopesForTest is readScopes: every read route and what a
// tenant-admin sees there.
var ReadScopesForTest = readScopes
