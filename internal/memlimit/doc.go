// Package memlimit gives the Go runtime a soft memory limit below the
// memory limit of the broker's container or systemd unit (cgroup v2
// memory.max, or cgroup v1 memory.limit_in_bytes), unless GOMEMLIMIT says
// otherwise. Without one the garbage collector lets the heap grow to twice
// what is live before it collects, so a broker with 500 MB live at 5,000
// nodes peaks past a 1 GiB limit and is OOM-killed; with one it collects
// harder as it nears the limit instead.
package memlimit
