#!/usr/bin/env bash
# The plain (one-rank) session of two builds side by side: greedy decode
# tok/s on the synthetic 15M and 110M shapes at the same --threads. Each
# round runs both builds one after the other, in the order opposite to the
# round before, so a noisy machine slows both alike and neither always goes
# first. The tok/s figures are medians of RUNS; the ratio is the median of
# the rounds' own ratios (this build's over the base's), with the lowest
# and highest. Use it when a change touches the session's path (the
# one-rank Session on the one engine must be no slower: bench/README.md,
# "Ranks").
#   bench/plain_ab.sh BASE_BUILD_DIR [BUILD_DIR] [RUNS] [THREADS]
# Prints a markdown table. The models are written to a temporary folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${1:?usage: bench/plain_ab.sh BASE_BUILD_DIR [BUILD_DIR] [RUNS] [THREADS]}/apps/accord
this=${2:-$root/build}/apps/accord
runs=${3:-5}
threads=${4:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$this" synth --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 32000 --seq 256 --out "$work/15M.bin" >/dev/null
"$this" synth --dim 768 --hidden 2048 --layers 12 --heads 12 --vocab 32000 --seq 1024 \
  --out "$work/110M.bin" >/dev/null

tok_s() {
  "$1" generate --model "$work/$2.bin" --prompt "Once upon a time" --temperature 0 --max-tokens "$3" \
    --threads "$threads" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_second"])'
}

results=$work/results.txt
for shape in 15M:200 110M:64; do
  model=${shape%%:*}
  tokens=${shape##*:}
  for round in $(seq "$runs"); do
    order=(base this)
    [ $((round % 2)) -eq 0 ] && order=(this base)
    for build in "${order[@]}"; do
      binary=$base
      [ "$build" = this ] && binary=$this
      echo "$model $round $build $(tok_s "$binary" "$model" "$tokens")" >>"$results"
    done
  done
done

python3 - "$results" <<'PY'
import statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    model, round_, build, value = line.split()
    rounds.setdefault(model, {}).setdefault(round_, {})[build] = float(value)
print("| shape | base tok/s | this tok/s | this / base (lowest-highest) |")
print("|---|---|---|---|")
for model in ("15M", "110M"):
    runs = rounds[model].values()
    base = statistics.median(r["base"] for r in runs)
    this = statistics.median(r["this"] for r in runs)
    ratios = [r["this"] / r["base"] for r in runs]
    print(f"| {model} | {base:.1f} | {this:.1f} | {statistics.median(ratios):.3f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}) |")
PY
