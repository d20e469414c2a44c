#!/usr/bin/env bash
# install.sh [VERSION...]: resolves the Hadoop YARN server jars of each
# VERSION from Maven Central and compiles the launcher against them, into
# ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/hadoop/VERSION (classpath.txt,
# classes/); Maven's own repository is $GPUBROKER_CACHE/m2. Without
# arguments it installs ${GPUBROKER_HADOOP_VERSIONS:-3.3.6,3.5.0}.
# Idempotent: with unchanged sources a second run only checks a stamp.
# Prints each install directory on its own line, the last one last.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}
if [[ $# -eq 0 ]]; then
  IFS=',' read -r -a versions <<<"${GPUBROKER_HADOOP_VERSIONS:-3.3.6,3.5.0}"
  set -- "${versions[@]}"
fi

# A JDK and Maven come from the distribution when missing (CI runs as root).
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven) >&2
  else
    echo "install.sh: need javac and mvn (a JDK 17 and Maven 3)" >&2
    exit 1
  fi
fi

src="$here/src/main/java/io/gpubroker/hadoop/Launcher.java"
res="$here/src/main/resources/log4j.properties"

install_version() {
  local v=$1 out=$cache/hadoop/$1 stamp
  mkdir -p "$out"
  exec 9>"$out/.lock"
  flock 9
  stamp=$( (echo "$v"; cat "$here/pom.xml" "$src" "$res") | sha256sum | cut -d' ' -f1)
  if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" && -f "$out/classpath.txt" ]]; then
    exec 9>&-
    echo "$out"
    return
  fi
  rm -f "$out/stamp"
  mvn -B -q -Dmaven.repo.local="$cache/m2" -Dhadoop.version="$v" -f "$here/pom.xml" \
    dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >&2
  rm -rf "$out/classes"
  mkdir -p "$out/classes"
  javac -nowarn -d "$out/classes" -cp "$(cat "$out/classpath.txt")" "$src" >&2
  cp "$res" "$out/classes/"
  echo "$stamp" >"$out/stamp"
  exec 9>&-
  echo "$out"
}

for v in "$@"; do
  install_version "$v"
done
