// Package certreload serves TLS certificates from PEM files and reloads
// them when the files change, so a rotated certificate (a renewed
// Kubernetes Secret, a cert-manager renewal, a replaced file) is served
// on the next handshake without a restart.
//
// Each handshake stats the files (no reads); when one changed — another
// file behind the name, as a Secret's atomic update or a rename leaves, or
// a new size or modification time — they are read again. A pair that does
// not load (a certificate written before its key) keeps the previous one
// in service and is tried again on the next handshake.
package certreload
