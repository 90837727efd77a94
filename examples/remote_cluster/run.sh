#!/usr/bin/env bash
# Three `accord node` processes on loopback and a client whose coordinator
# drives them (examples/remote_cluster/README.md).
#   examples/remote_cluster/run.sh [BUILD_DIR]
# BUILD_DIR defaults to build/; the model is stories260K from ../shared.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
accord=${1:-$root/build}/apps/accord
models=${ACCORD_SHARED:-$root/../shared}/models
logs=$(mktemp -d)
pids=()
# The nodes go whatever happens to the client.
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$logs"' EXIT

source "$root/scripts/nodes.sh"
start_nodes "$accord" "$logs" 3 --model-dir "$models"
for rank in 0 1 2; do echo "rank $rank: node ${peers[$rank]}"; done

"$accord" generate --model "$models/stories260K.bin" --tokenizer "$models/tok512.bin" \
  --prompt "Once upon a time" --temperature 0 --max-tokens 64 \
  --peers "$(IFS=,; echo "${peers[*]}")"

for rank in 0 1 2; do
  echo "--- node $rank"
  cat "$logs/node-$rank.log"
done
