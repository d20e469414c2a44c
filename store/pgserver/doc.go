// Package pgserver runs a private PostgreSQL server from the Debian server
// binaries: initdb into a data directory, then postgres on a loopback port.
// The demo uses it for its database and the test harness for every test
// package. As root it runs the server as the unprivileged user "nobody",
// since PostgreSQL refuses to run as root.
package pgserver
