#!/usr/bin/env bash
# tools/device-deps.sh — stage the build dependencies the GPU machine lacks into .deps/
# (it has libjansson.so.4 but no headers, and no cmocka). Run from the repo root on a
# Debian/Ubuntu machine with apt; then carry ".deps" to the GPU machine and build with
#   export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
#   export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
#   cmake -B build -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build build -j
# Extends ../shared/tools/device-deps.sh (Jansson only) with cmocka for the tests.
set -euo pipefail
dest=${1:-.deps}
pkgs=(libjansson-dev libjansson4 libcmocka-dev libcmocka0)
mkdir -p "$dest/debs" .git/info
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
if ! (cd "$dest/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>&1); then
  apt-get update -qq >/dev/null
  (cd "$dest/debs" && apt-get download "${pkgs[@]}")
fi
for f in "$dest"/debs/*.deb; do dpkg -x "$f" "$dest"; done
# make each .pc file point at the staged prefix wherever it is unpacked
# (jansson.pc has a prefix= line; cmocka.pc spells absolute paths out)
for pc in $(find "$dest" -name '*.pc'); do
  sed -i -e "s|^prefix=.*|prefix=\${pcfiledir}/../../..|" \
         -e "s|-L/usr/lib/x86_64-linux-gnu|-L\${pcfiledir}/..|" \
         -e "s|-I/usr/include|-I\${pcfiledir}/../../../include|" "$pc"
done
echo "staged: $(find "$dest" -name jansson.h -o -name cmocka.h | tr '\n' ' ')"
