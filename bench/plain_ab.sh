#!/usr/bin/env bash
# The plain (one-rank) session of two builds side by side: greedy decode
# tok/s on the synthetic 15M and 110M shapes at the same --threads, runs
# alternating (base, this, base, ...) so a noisy machine slows both alike.
# Each figure is the median of RUNS; the ratio is this build's over the
# base's. Use it when a change touches the session's path (issue 13: the
# one-rank Session on the one engine must be no slower).
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
  for _ in $(seq "$runs"); do
    echo "$model base $(tok_s "$base" "$model" "$tokens")" >>"$results"
    echo "$model this $(tok_s "$this" "$model" "$tokens")" >>"$results"
  done
done

python3 - "$results" <<'PY'
import statistics, sys
figures = {}
for line in open(sys.argv[1]):
    model, build, value = line.split()
    figures.setdefault((model, build), []).append(float(value))
print("| shape | base tok/s | this tok/s | this / base |")
print("|---|---|---|---|")
for model in ("15M", "110M"):
    base = statistics.median(figures[(model, "base")])
    this = statistics.median(figures[(model, "this")])
    print(f"| {model} | {base:.1f} | {this:.1f} | {this / base:.3f} |")
PY
