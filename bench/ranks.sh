#!/usr/bin/env bash
# What ranks cost (issue 13): greedy decode tok/s of a plain session, of 2, 3
# and 4 in-process ranks and of 3 `accord node` processes on loopback, on
# the synthetic 15M and 110M shapes, at the same --threads. The runs
# alternate (plain, ranks 2, 3, 4, nodes, plain, ...) so a noisy machine
# slows them alike; each figure is the median of RUNS, each ratio is
# against the plain session of the same run. `protocol` is the wall time
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
rows = {}
for line in open(sys.argv[1]):
    model, config, _, rate, protocol_us = line.split()
    rows.setdefault((model, config), []).append((float(rate), float(protocol_us)))
print("threads: %s; medians of %d alternating runs" % (sys.argv[2], len(next(iter(rows.values())))))
print()
print("| shape | run | decode tok/s | vs plain | vs 3 ranks | protocol us/token | protocol share |")
print("|---|---|---|---|---|---|---|")
for (model, config), samples in rows.items():
    rate = statistics.median(s[0] for s in samples)
    protocol = statistics.median(s[1] for s in samples)
    plain = statistics.median(s[0] for s in rows[(model, "plain")])
    three = statistics.median(s[0] for s in rows[(model, "ranks:3")])
    versus_three = "%.2f" % (rate / three) if config == "nodes:3" else ""
    share = protocol * rate / 1e6
    protocol_cells = ("%.0f" % protocol, "%.1f%%" % (100 * share)) if config.startswith("ranks") else ("", "")
    print("| %s | %s | %.1f | %.2f | %s | %s | %s |" % ((model, config, rate, rate / plain, versus_three)
                                                       + protocol_cells))
EOF
