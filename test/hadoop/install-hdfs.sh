#!/usr/bin/env bash
# install-hdfs.sh [VERSION]: resolves the shaded Hadoop minicluster of
# VERSION (default 3.3.6) and compiles HdfsLauncher against it, into
# ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/hadoop/VERSION/hdfs
# (classpath.txt, classes/). Idempotent: a stamp of the sources skips a
# second build. Prints the install directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}
v=${1:-3.3.6}
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven) >&2
  else
    echo "install-hdfs.sh: need javac and mvn (a JDK 17 and Maven 3)" >&2
    exit 1
  fi
fi
src="$here/hdfs/src/io/gpubroker/hadoop/HdfsLauncher.java"
out=$cache/hadoop/$v/hdfs
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
stamp=$( (echo "$v"; cat "$here/hdfs/pom.xml" "$src") | sha256sum | cut -d' ' -f1)
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" && -f "$out/classpath.txt" ]]; then
  echo "$out"
  exit 0
fi
rm -f "$out/stamp"
mvn -B -q -Dmaven.repo.local="$cache/m2" -Dhadoop.version="$v" -f "$here/hdfs/pom.xml" \
  dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >&2
rm -rf "$out/classes"
mkdir -p "$out/classes"
javac -nowarn -d "$out/classes" -cp "$(cat "$out/classpath.txt")" "$src" >&2
cp "$here/src/main/resources/log4j.properties" "$out/classes/"
echo "$stamp" >"$out/stamp"
echo "$out"
