#!/usr/bin/env bash
# install.sh VERSION: resolves the Hadoop mini cluster VERSION from Maven
# Central and compiles the launcher against it, into
# ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/hadoop/VERSION (classpath.txt,
# classes/). Idempotent: a second run with unchanged sources only checks a
# stamp. Prints the install directory on its last line.
set -euo pipefail
v=${1:?usage: install.sh HADOOP_VERSION}
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}
out=$cache/hadoop/$v
mkdir -p "$out"
# A JDK and Maven come from the distribution when missing (CI runs as root).
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven) >&2
  else
    echo "install.sh: need javac and mvn (a JDK 17 and Maven 3)" >&2
    exit 1
  fi
fi
exec 9>"$out/.lock"
flock 9
src="$here/src/main/java/io/gpubroker/hadoop/Launcher.java"
res="$here/src/main/resources/log4j.properties"
stamp=$( (echo "$v"; cat "$here/pom.xml" "$src" "$res") | sha256sum | cut -d' ' -f1)
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" && -f "$out/classpath.txt" ]]; then
  echo "$out"
  exit 0
fi
rm -f "$out/stamp"
mvn -B -q -Dmaven.repo.local="$cache/m2" -Dhadoop.version="$v" -f "$here/pom.xml" \
  dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >&2
rm -rf "$out/classes"
mkdir -p "$out/classes"
javac -nowarn -d "$out/classes" -cp "$(cat "$out/classpath.txt")" "$src" >&2
cp "$res" "$out/classes/"
echo "$stamp" >"$out/stamp"
echo "$out"
