#!/usr/bin/env bash
# How long healing takes (docs/healing.md): a greedy generation on the synthetic
# 110M shape over 3 `accord node` processes and a spare, on loopback; rank
# 1's node is killed with SIGKILL DELAY_MS into the run. Prints, per run,
# whether the tokens equal an uninterrupted run's, the heals, heal_seconds,
# the replayed tokens, the replay's share (replayed tokens at the run's
# prefill rate) and what the heal took besides.
#   bench/heal.sh [BUILD_DIR] [RUNS] [DELAY_MS] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
accord=${1:-$root/build}/apps/accord
runs=${2:-3}
delay_ms=${3:-3000}
threads=${4:-2}
source "$root/scripts/nodes.sh"
use_scratch_folder
synth_shape "$accord" 110M "$work/110M.bin"

# A longer prompt, so that the reference run's prefill rate is that of a
# batch like the replay's.
prompt=$(printf 'Once upon a time %.0s' $(seq 8))
generate() {
  "$accord" generate --model "$work/110M.bin" --prompt "$prompt" --temperature 0 \
    --max-tokens 64 --threads "$threads" --json "$@"
}

start_nodes "$accord" "$work" 3 --model "$work/110M.bin"
generate --peers "$(IFS=,; echo "${peers[*]}")" >"$work/reference.json"
kill "${pids[@]}" && wait 2>/dev/null || true

echo "| run | tokens | heals | heal_seconds | replayed | replay (est.) s | heal besides replay s |"
echo "|---|---|---|---|---|---|---|"
for run in $(seq "$runs"); do
  pids=()
  start_nodes "$accord" "$work" 4 --model "$work/110M.bin"
  victim=${pids[1]}
  spare=${peers[3]}
  nodes=$(IFS=,; echo "${peers[*]:0:3}")
  (sleep "$(python3 -c "print($delay_ms / 1000)")"; kill -9 "$victim") &
  killer=$!
  generate --peers "$nodes" --spares "$spare" >"$work/healed.json" 2>"$work/healed.err" || true
  wait "$killer"
  python3 - "$work/reference.json" "$work/healed.json" "$run" <<'EOF'
import json, sys
reference, healed = (json.load(open(path)) for path in sys.argv[1:3])
same = "identical" if healed["generated_tokens"] == reference["generated_tokens"] else "DIFFERENT"
prefill_rate = reference["prefill_tokens_per_second"]
replay = healed["replayed_tokens"] / prefill_rate if prefill_rate else float("nan")
print(f"| {sys.argv[3]} | {same} | {healed['heals']} | {healed['heal_seconds']:.3f} | {healed['replayed_tokens']} "
      f"| {replay:.3f} | {healed['heal_seconds'] - replay:.3f} |")
EOF
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
done
