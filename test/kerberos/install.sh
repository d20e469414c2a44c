#!/usr/bin/env bash
# install.sh: unpacks MIT Kerberos from the Debian archive (krb5kdc,
# kdb5_util, kadmin.local, kinit, klist and the libraries they need) into
# ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}/krb5, without installing
# anything on the system: `apt-get download` and `dpkg -x`, as any user.
# The test KDC (test/kdc) runs the binaries from there with
# LD_LIBRARY_PATH pointing at the unpacked libraries.
# Idempotent: a stamp of this script skips a second run. Prints the
# install directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}
out=$cache/krb5
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
stamp=$(sha256sum "$here/install.sh" | cut -d' ' -f1)
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" && -x "$out/root/usr/sbin/krb5kdc" ]]; then
  echo "$out"
  exit 0
fi
rm -rf "$out/root" "$out/debs" "$out/stamp"
mkdir -p "$out/debs" "$out/root"
# The KDC and its tools with every MIT library they link, all from one
# release, so no library of another patch level on the system is mixed in.
pkgs=(krb5-kdc krb5-admin-server krb5-user libkrb5-3 libk5crypto3 libkrb5support0
  libgssapi-krb5-2 libkdb5-10 libkadm5srv-mit12 libkadm5clnt-mit12 libgssrpc4
  libverto1 libverto-libev1 libev4 libcom-err2 libss2 libkeyutils1)
(cd "$out/debs" && apt-get download -q "${pkgs[@]}") >&2 || {
  echo "install.sh: apt-get download failed; run 'apt-get update' first or check the Debian mirror" >&2
  exit 1
}
for d in "$out"/debs/*.deb; do
  dpkg -x "$d" "$out/root"
done
rm -rf "$out/debs"
echo "$stamp" >"$out/stamp"
echo "$out"
