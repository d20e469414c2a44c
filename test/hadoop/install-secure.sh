#!/usr/bin/env bash
# install-secure.sh [VERSION]: compiles the kerberized launchers of
# secure/ (SecureRM against the YARN jars of install.sh VERSION, SecureNN
# against the HDFS minicluster of install-hdfs.sh, 3.3.6) into
# ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/hadoop/VERSION/secure/{rm,nn}
# (classpath.txt, classes/). Idempotent: a stamp of the sources skips a
# second build. Prints the install directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}
v=${1:-3.3.6}
yarn_home=$("$here/install.sh" "$v" | tail -n1)
hdfs_home=$("$here/install-hdfs.sh" 3.3.6 | tail -n1)
out=$cache/hadoop/$v/secure
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
src=$here/secure/src/io/gpubroker/hadoop
stamp=$( (echo "$v"; cat "$src/SecureRM.java" "$src/SecureNN.java" "$yarn_home/classpath.txt" "$hdfs_home/classpath.txt") | sha256sum | cut -d' ' -f1)
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then
  echo "$out"
  exit 0
fi
rm -f "$out/stamp"
for part in rm nn; do
  rm -rf "${out:?}/$part"
  mkdir -p "$out/$part/classes"
done
cp "$yarn_home/classpath.txt" "$out/rm/classpath.txt"
cp "$hdfs_home/classpath.txt" "$out/nn/classpath.txt"
javac -nowarn -d "$out/rm/classes" -cp "$(cat "$out/rm/classpath.txt")" "$src/SecureRM.java" >&2
javac -nowarn -d "$out/nn/classes" -cp "$(cat "$out/nn/classpath.txt")" "$src/SecureNN.java" >&2
cp "$here/src/main/resources/log4j.properties" "$out/rm/classes/"
cp "$here/src/main/resources/log4j.properties" "$out/nn/classes/"
echo "$stamp" >"$out/stamp"
echo "$out"
