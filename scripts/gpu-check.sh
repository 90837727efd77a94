#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU (docs/gpu.md),
# in one run of a few minutes: the devices; each kernel against the CPU's;
# stories260K's logits and greedy tokens against the CPU's; `accord
# generate --backend cuda` on 1, 2 and 4 ranks sharing the one device, its
# greedy tokens against the CPU's; a synthetic
# 1B-class F16 model's logits and tokens, then its decode tokens/s and the
# share of the device's memory bandwidth its weights take.
#   scripts/gpu-check.sh [--no-build] [BUILD_DIR] [PEAK_GBS]
#   scripts/gpu-check.sh --bundle FILE [PEAK_GBS]
# BUILD_DIR defaults to build-gpu/; --no-build runs what is already built
# there. --bundle runs what scripts/gpu-bundle.sh packed, with its
# libraries and models: a build carried to a machine that cannot install
# the build's packages. PEAK_GBS: the device's memory bandwidth in GB/s, by
# default an H200's 4800. Once a device answers, runs every check (a
# device's time is scarce) and exits 1 naming those that failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_first=1
source "$root/scripts/shared_dir.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "${1:-}" = "--bundle" ]; then
  tar -xJf "$2" -C "$work" || exit 1
  export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ACCORD_SHARED="$work/shared"
  set -- --no-build "$work/build" "${@:3}"
fi
if [ "${1:-}" = "--no-build" ]; then
  build_first=0
  shift
fi
build=${1:-$root/build-gpu}
peak=${2:-4800}
shared=$(shared_dir "$root")
if [ "$build_first" = 1 ]; then
  for target in accord accord-cuda-check; do
    "$root/scripts/build.sh" --target "$target" "$build" -DCMAKE_BUILD_TYPE=Release -DACCORD_CUDA=ON \
      -DACCORD_BUILD_TESTS=OFF || exit 1
  done
fi
check_tool=$build/apps/accord-cuda-check
accord=$build/apps/accord

failed=()
# Runs a check, a name and its command, and keeps its name if it fails.
check() {
  local name=$1
  shift
  echo "== $name"
  "$@" || failed+=("$name")
}

check devices "$check_tool" devices
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: devices: nothing else can run"
  exit 1
fi
check "kernels against the CPU" "$check_tool" kernels
check "stories260K against the CPU" "$check_tool" model --model "$shared/models/stories260K.bin" --tokens 200

# The greedy tokens of `accord generate` on these options.
greedy_tokens() {
  "$accord" generate --model "$shared/models/stories260K.bin" --prompt "Once upon a time" --max-tokens 120 \
    --temperature 0 --json "$@" 2>/dev/null | sed -n 's/.*"generated_tokens":\(\[[^]]*\]\).*/\1/p'
}
# Ranks on the one device: their greedy tokens are the CPU's.
cuda_ranks_match_the_cpu() {
  local cpu_tokens cuda_tokens ranks
  cpu_tokens=$(greedy_tokens --backend cpu)
  for ranks in 1 2 4; do
    cuda_tokens=$(greedy_tokens --backend cuda --devices 0 --ranks "$ranks")
    if [ -z "$cuda_tokens" ] || [ "$cuda_tokens" != "$cpu_tokens" ]; then
      echo "ranks $ranks: tokens differ from the CPU's: FAILED"
      echo "  cpu:  $cpu_tokens"
      echo "  cuda: ${cuda_tokens:-(none)}"
      "$accord" generate --model "$shared/models/stories260K.bin" --max-tokens 4 --backend cuda --ranks "$ranks"
      return 1
    fi
    echo "ranks $ranks: 120 greedy tokens identical to the CPU's  ok"
  done
}
check "accord generate --backend cuda: ranks on one device against the CPU" cuda_ranks_match_the_cpu

echo "== synthetic 1B-class shape, F16 (dim 2048, 16 layers, vocab 32000)"
if "$accord" synth --dim 2048 --hidden 8192 --layers 16 --heads 32 --kv-heads 8 --vocab 32000 --seq 1024 \
  --out "$work/1b.bin" >/dev/null && "$accord" convert --in "$work/1b.bin" --out "$work/1b-f16.gguf" --type f16 >/dev/null; then
  rm "$work/1b.bin"
  check "1B-class F16 against the CPU" "$check_tool" model --model "$work/1b-f16.gguf" --tokens 16
  check "1B-class F16 decode" "$check_tool" bench --model "$work/1b-f16.gguf" --tokens 256 --peak-gbs "$peak"
else
  failed+=("the 1B-class model")
fi

if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "every check passed"
