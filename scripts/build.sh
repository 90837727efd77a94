#!/usr/bin/env bash
# Configures and builds accord into a build folder.
#   scripts/build.sh [--target TARGET]... [BUILD_DIR] [extra cmake arguments...]
# BUILD_DIR defaults to build/; everything is built unless targets are
# named. Release unless the arguments say otherwise.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
targets=()
while [ "${1:-}" = "--target" ]; do
  targets+=("$2")
  shift 2
done
build=${1:-$root/build}
shift || true
mkdir -p "$build"
# Configure output is kept out of the way unless it fails.
cmake -S "$root" -B "$build" "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
cmake --build "$build" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
