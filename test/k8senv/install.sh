#!/usr/bin/env bash
# install.sh builds the control-plane binaries test/k8senv needs (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kwok) from the pinned tools modules under
# tools/ and caches them OUTSIDE the repository under
#   ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/k8s-v1.36.3/bin
# together with the KWOK stage definitions (stages.yaml next to bin/).
# It is idempotent (a second run takes well under a second) and safe to run from
# several processes at once (flock). It prints the bin directory on its last line.
#
# A cold build takes several minutes (kube-apiserver dominates); GOFLAGS=-p=N trades
# speed for leaving cores to others (default -p=2).
set -euo pipefail

K8S_VERSION=v1.36.3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}"
root="$cache/k8s-$K8S_VERSION"
bin="$root/bin"
mkdir -p "$bin"

exec 9>"$root/.lock"
flock 9

export GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false -trimpath"
export CGO_ENABLED=0
export GOWORK=off

build() { # build <tools module dir> <package> <binary name>
	local mod="$1" pkg="$2" name="$3"
	if [[ -x "$bin/$name" ]]; then
		return 0
	fi
	echo "k8senv: building $name from $pkg (cached in $bin)" >&2
	local start=$SECONDS
	(cd "$here/tools/$mod" && go build -ldflags='-s -w' -o "$bin/.$name.tmp" "$pkg")
	mv -f "$bin/.$name.tmp" "$bin/$name"
	echo "k8senv: built $name in $((SECONDS - start))s" >&2
}

build etcd go.etcd.io/etcd/server/v3 etcd
build kwok sigs.k8s.io/kwok/cmd/kwok kwok
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver

# KWOK stage definitions ship inside the kwok module: nodes become Ready and keep
# their lease, pods on fake nodes run, deleted pods go away. Job pods complete by
# pod-complete.yaml next to this script, which Start appends (stages.go): a copy
# of the upstream stage that leaves pods annotated k8senv.gpubroker.io/keep-running.
if [[ ! -s "$root/stages.yaml" ]]; then
	kwokdir="$(cd "$here/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	s="$kwokdir/kustomize/stage"
	{
		for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
			pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
			echo "---"
			cat "$s/$f"
		done
	} >"$root/.stages.tmp"
	mv -f "$root/.stages.tmp" "$root/stages.yaml"
fi
echo "$bin"
