#!/usr/bin/env bash
# Installs the build, builds examples/embed_in_service out of tree against
# the installed package (find_package(accord)), and runs it: the greedy
# tokens must be run.c's.
#   check.sh BUILD_DIR SOURCE_DIR SHARED_DIR WORK_DIR
set -euo pipefail
build=$1 source=$2 shared=${ACCORD_SHARED:-$3} work=$4
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/accord"
config=$(grep -m1 '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" | cut -d= -f2)
cmake -S "$source/examples/embed_in_service" -B "$work/service" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE="$config" >/dev/null
cmake --build "$work/service" >/dev/null
out=$("$work/service/embed_in_service" "$shared/models/stories260K.bin" 403 407 261 378)
echo "$out"
grep -q "generated: 432 383 286 261 376 298 315 421 395 317" <<<"$out"
