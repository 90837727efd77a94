#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UBSan, a build
# folder of their own) and runs each one for a bounded time.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 20; ACCORD_FUZZ_SECONDS too)
# Seeds are written fresh by the Release build's `accord synth`, `accord
# convert` and `accord generate --prompt-cache` (a manifest; build/, built
# when missing), and here (fault plans), so the fuzz build compiles only
# what the targets link: the actors, the CLI and `accord serve` take most
# of a build under the sanitizers. Each target's corpus grows in
# build-fuzz/corpus/.
# A crash, leak, sanitizer report or timeout fails the script and leaves the
# input in build-fuzz/crash-*.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-${ACCORD_FUZZ_SECONDS:-20}}
build=$root/build-fuzz

# Each target, with the seeds (written below) its corpus starts from.
declare -A corpus=(
  [gguf_fuzz]="tiny-f32.gguf tiny-f16.gguf tiny-q8_0.gguf tiny-q4_0.gguf"
  [llama2c_fuzz]="tiny.bin"
  [tokenizer_fuzz]="tiny.tokenizer.bin tiny-q8_0.gguf"
  [manifest_fuzz]="manifest.json"
  [fault_plan_fuzz]="fault-one fault-list"
)
target_arguments=()
for target in "${!corpus[@]}"; do target_arguments+=(--target "$target"); done
echo "== accord: building the fuzz targets in $build"
"$root/scripts/build.sh" "${target_arguments[@]}" "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DACCORD_FUZZ=ON -DACCORD_BUILD_TESTS=OFF -DACCORD_BUILD_BENCH=OFF -DACCORD_CUDA=OFF
"$root/scripts/build.sh" --target accord "$root/build"

seeds=$build/seeds
mkdir -p "$seeds"
accord=$root/build/apps/accord
"$accord" synth --dim 32 --hidden 64 --layers 1 --heads 2 --kv-heads 1 --vocab 260 --seq 8 \
  --out "$seeds/tiny.bin" >/dev/null
for type in f32 f16 q8_0 q4_0; do
  "$accord" convert --in "$seeds/tiny.bin" --out "$seeds/tiny-$type.gguf" --type "$type" >/dev/null
done
rm -rf "$seeds/cache"
"$accord" generate --model "$seeds/tiny.bin" --prompt "hi" --max-tokens 1 --prompt-cache "$seeds/cache" --json >/dev/null
cp "$(find "$seeds/cache" -name manifest.json | head -n 1)" "$seeds/manifest.json"
printf '%s' "1:Execution:error" >"$seeds/fault-one"
printf '%s' "0:BoundarySourceReady(0->1):drop:2;;2:PromptCacheSavePublication:corrupt" >"$seeds/fault-list"

for target in "${!corpus[@]}"; do
  dir=$build/corpus/$target
  mkdir -p "$dir"
  for seed in ${corpus[$target]}; do cp "$seeds/$seed" "$dir/"; done
  echo "== accord: fuzzing $target for ${seconds}s"
  log=$build/$target.log
  if ! (cd "$build" && "$build/fuzz/$target" "$dir" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/crash-$target-" >"$log" 2>&1); then
    tail -n 60 "$log"
    echo "== accord: $target FAILED; the input is in $build/crash-$target-*"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added" "$log" | sed "s/^/   $target /"
done
echo "== accord: every fuzz target ran clean"
