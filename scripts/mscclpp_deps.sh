#!/usr/bin/env bash
# Prepare, on a machine with the network, what a lent GPU host needs to build MSCCL++ offline (issue 40's
# benchmark peer; never a dependency of Loom's build or tests). Writes build/mscclpp-deps (carry it):
#   mscclpp.tar.gz   MSCCL++'s sources at the pinned commit (MSCCLPP_COMMIT), from MSCCLPP_SRC (a clone)
#   json/            nlohmann json's sources for FETCHCONTENT_SOURCE_DIR_JSON (JSON_SRC, a clone): the
#                    CMake files and headers only
#   usr/             libnuma's headers and library (Debian packages unpacked with dpkg -x)
# scripts/mscclpp_build.sh builds from them on the GPU host.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${MSCCLPP_COMMIT:-1f5f065d7b13ab02df32c22568f38785d1eeec01}  # 0.9.0 + fixes, 2026-08-20
src=${MSCCLPP_SRC:?a clone of github.com/microsoft/mscclpp that has commit $commit}
json=${JSON_SRC:?a clone of github.com/nlohmann/json (MSCCL++ asks for v3.12.0)}
json_ref=${JSON_REF:-v3.12.0}
out=build/mscclpp-deps
rm -rf "$out" && mkdir -p "$out/json" "$out/debs"
git -C "$src" archive --format=tar.gz -o "$PWD/$out/mscclpp.tar.gz" "$commit"
echo "$commit" >"$out/mscclpp.commit"
# What add_subdirectory on json reads; its tests and docs are most of the repository.
if ! git -C "$json" rev-parse -q --verify "$json_ref^{commit}" >/dev/null; then
  echo "JSON_SRC has no $json_ref; taking its HEAD (set JSON_REF to choose)" >&2
  json_ref=HEAD
fi
git -C "$json" archive "$json_ref" CMakeLists.txt cmake include LICENSE.MIT nlohmann_json.natvis |
  tar -x -C "$out/json"
git -C "$json" describe --tags --always "$json_ref" >"$out/json.version" 2>/dev/null ||
  git -C "$json" rev-parse "$json_ref" >"$out/json.version"
(cd "$out/debs" && apt-get download -q libnuma-dev libnuma1 >/dev/null)
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out"; done
rm -f "$out"/usr/lib/x86_64-linux-gnu/libnuma.a
rm -rf "$out/debs"
du -sh "$out"
