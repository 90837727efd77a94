#!/usr/bin/env bash
# Three `accord node` processes on loopback against three in-process ranks,
# on the same model and prompt: decode tok/s, and what a phase round costs
# more over loopback than in one process (the step time difference spread
# over the step's rounds; docs/protocol.md, "Remote ranks").
#   bench/remote_cluster.sh [BUILD_DIR] [TOKENS]
# The model is a synthetic 110M (dim 768, 12 layers, vocabulary 32000),
# written to a temporary folder; BUILD_DIR defaults to build/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
accord=${1:-$root/build}/apps/accord
tokens=${2:-48}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$accord" synth --dim 768 --hidden 2048 --layers 12 --heads 12 --vocab 32000 --seq 1024 \
  --out "$work/110M.bin" >/dev/null
source "$root/scripts/nodes.sh"
start_nodes "$accord" "$work" 3 --model "$work/110M.bin"

# One generation as --json reports it: tok/s, ms per decode step, phase rounds per step.
run() {
  "$accord" generate --model "$work/110M.bin" --prompt "Once upon a time" --temperature 0 \
    --max-tokens "$tokens" --threads 1 --json "$@" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
steps = len(r["generated_tokens"])
print("%.2f %.3f %.2f" % (r["decode_tokens_per_second"], r["decode_seconds"] * 1e3 / (steps - 1), r["phases_run"] / steps))'
}

read -r local_rate local_ms rounds < <(run --ranks 3)
read -r remote_rate remote_ms _ < <(run --peers "$(IFS=,; echo "${peers[*]}")")
echo "3 in-process ranks: $local_rate tok/s, $local_ms ms per decode step, $rounds phase rounds per step"
echo "3 node processes:   $remote_rate tok/s, $remote_ms ms per decode step"
python3 -c "print('loopback: %.0f us more per phase round' % (($remote_ms - $local_ms) * 1e3 / $rounds))"
