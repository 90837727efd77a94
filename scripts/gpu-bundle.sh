#!/usr/bin/env bash
# Packs a CUDA build for a GPU machine that cannot build accord or install
# its packages (the lent device machines: CUDA's driver and toolkit, no
# CAF): `accord` and `accord-cuda-check`, the shared libraries they load
# beyond the C and C++ runtimes, and the small models the checks read.
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT]
# BUILD_DIR defaults to build-gpu/ (scripts/gpu-check.sh builds it), OUT to
# gpu-bundle.tar.xz. There: scripts/gpu-check.sh --bundle OUT (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
out=$(realpath -m "${2:-gpu-bundle.tar.xz}")
source "$root/scripts/shared_dir.sh"
shared=$(shared_dir "$root")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/apps" "$stage/lib" "$stage/shared/models"
for app in accord accord-cuda-check; do
  if [ ! -x "$build/apps/$app" ]; then
    echo "gpu-bundle: $build/apps/$app is not built (scripts/gpu-check.sh builds it)" >&2
    exit 1
  fi
  cp "$build/apps/$app" "$stage/build/apps/"
  # Every library ldd resolves, but the C and C++ runtimes, which the machine has.
  ldd "$build/apps/$app" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
    while read -r library; do cp -L -n "$library" "$stage/lib/"; done
done
cp "$shared/models/stories260K.bin" "$shared/models/tok512.bin" "$stage/shared/models/"
tar -cJf "$out" -C "$stage" .
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1))"
