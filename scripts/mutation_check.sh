#!/usr/bin/env bash
# The simulator's mutation check (docs/simulation.md): each patch in
# sim/mutations flips one rule of the agreement. In a throwaway worktree of
# HEAD, each is applied in turn, accord-sim is built and run over SEEDS
# seeds (default 1000), and the patch is taken back. Every mutation must
# be found; the exit code is 1 when one survives. About ten minutes on two
# cores (one build of the runtime, then one file per mutation).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds=${1:-1000}
work=$(mktemp -d)
git -C "$root" worktree add --detach -q "$work/tree" HEAD
trap 'git -C "$root" worktree remove --force "$work/tree"; rm -rf "$work"' EXIT
cmake -S "$work/tree" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DACCORD_BUILD_BENCH=OFF >/dev/null
survived=0
for patch in "$root"/sim/mutations/*.patch; do
  name=$(basename "$patch" .patch)
  git -C "$work/tree" apply "$patch"
  make -C "$work/build" accord-sim -j"$(nproc)" >/dev/null
  if out=$("$work/build/sim/accord-sim" --seeds "$seeds"); then
    echo "SURVIVED $name: no violation in $seeds seeds"
    survived=1
  else
    echo "found $name: $(grep -m1 VIOLATION <<<"$out")"
  fi
  git -C "$work/tree" apply -R "$patch"
done
exit "$survived"
