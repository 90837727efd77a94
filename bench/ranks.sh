#!/usr/bin/env bash
# What ranks cost: greedy decode tok/s of a plain session, of 2, 3
# and 4 in-process ranks and of 3 `accord node` processes on loopback, on
# the synthetic 15M and 110M shapes, at the same --threads. The runs
# alternate (plain, ranks 2, 3, 4, nodes, plain, ...) so a noisy machine
# slows them alike; each figure is the median of RUNS, each ratio the
# median of the rounds' ratios against the plain session (nodes: also
# against 3 ranks) of the same round, with the lowest and highest, since
# this project's machines change speed by 3x between runs (a plain 110M
# session at 39 to 117 tok/s) and by a fifth within one. `protocol` is the wall time
# per decode step the ranks did not spend computing, as a share of the step
# (in-process ranks only: a node's compute time stays on the node).
#   bench/ranks.sh [BUILD_DIR] [RUNS] [THREADS]
# Prints a markdown table. The models are written to a temporary folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
accord=${1:-$root/build}/apps/accord
runs=${2:-3}
threads=${3:-2}
source "$root/scripts/nodes.sh"
use_scratch_folder
synth_shape "$accord" 15M "$work/15M.bin"
synth_shape "$accord" 110M "$work/110M.bin"

# One generation: "tok/s protocol_us_per_token" (0 for a plain session).
run() {
  local model=$1 tokens=$2
  shift 2
  "$accord" generate --model "$work/$model.bin" --prompt "Once upon a time" --temperature 0 \
    --max-tokens "$tokens" --threads "$threads" --json "$@" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)
print(r["decode_tokens_per_second"], r.get("protocol_us_per_token", "nan"))'
}

results=$work/results.txt
for shape in 15M:200 110M:64; do
  model=${shape%%:*}
  tokens=${shape##*:}
  start_nodes "$accord" "$work" 3 --model "$work/$model.bin"
  nodes=$(IFS=,; echo "${peers[*]}")
  for round in $(seq "$runs"); do
    # The idle nodes are stopped while the in-process runs go: their
    # scheduler threads wake every 10 ms and take the cores from them.
    kill -STOP "${pids[@]}"
    echo "$model plain $round $(run "$model" "$tokens")" >>"$results"
    for ranks in 2 3 4; do
      echo "$model ranks:$ranks $round $(run "$model" "$tokens" --ranks "$ranks")" >>"$results"
    done
    kill -CONT "${pids[@]}"
    echo "$model nodes:3 $round $(run "$model" "$tokens" --peers "$nodes")" >>"$results"
  done
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
done

python3 - "$results" "$threads" <<'EOF'
import statistics, sys
# samples[(model, config)][round] = (tok/s, protocol us/token)
samples = {}
for line in open(sys.argv[1]):
    model, config, round_, rate, protocol_us = line.split()
    samples.setdefault((model, config), {})[round_] = (float(rate), float(protocol_us))

def paired(model, config, against):
    """Median and range of the per-round ratios: a round's runs follow one
    another, so a machine that slows down over the run slows both alike."""
    ratios = [samples[(model, config)][r][0] / samples[(model, against)][r][0] for r in samples[(model, config)]]
    return "%.2f (%.2f-%.2f)" % (statistics.median(ratios), min(ratios), max(ratios))

print("threads: %s; medians of %d alternating rounds; ratios are medians of each round's ratio "
      "(lowest-highest)" % (sys.argv[2], len(next(iter(samples.values())))))
print()
print("| shape | run | decode tok/s | vs plain | vs 3 ranks | protocol us/token | protocol share |")
print("|---|---|---|---|---|---|---|")
for (model, config), rounds in samples.items():
    rate = statistics.median(s[0] for s in rounds.values())
    protocol = statistics.median(s[1] for s in rounds.values())
    share = statistics.median(s[1] * s[0] / 1e6 for s in rounds.values())
    versus_three = paired(model, config, "ranks:3") if config == "nodes:3" else ""
    protocol_cells = ("%.0f" % protocol, "%.1f%%" % (100 * share)) if config.startswith("ranks") else ("", "")
    print("| %s | %s | %.1f | %s | %s | %s | %s |" % ((model, config, rate, paired(model, config, "plain"),
                                                       versus_three) + protocol_cells))
EOF
