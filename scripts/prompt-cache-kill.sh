#!/usr/bin/env bash
# A kill -9 campaign against the prompt cache (docs/prompt-cache.md):
#   scripts/prompt-cache-kill.sh [RUNS (default 300)] [MAX_DELAY_US (default 25000)]
# Each run starts `accord generate --ranks 3 --prompt-cache` (every other
# one over a cache of another prompt) and kills it with SIGKILL after a
# random delay below MAX_DELAY_US, about the length of a whole run with
# stories260K here. Two runs follow; both must print the tokens of a run
# without a cache, and the second must hit. Prints the counts: wrong tokens
# and caches not hit must be 0; `healed` counts the openings that repaired
# a publication the kill left mixed. Needs a built build/apps/accord.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/shared_dir.sh"
shared=$(shared_dir "$root")
accord=$root/build/apps/accord
runs=${1:-300}
max_delay_us=${2:-25000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

generate() {  # PROMPT CACHE: prints the JSON line
  "$accord" generate --model "$shared/models/stories260K.bin" --tokenizer "$shared/models/tok512.bin" \
    --prompt "$1" --temperature 0 --max-tokens 12 --ranks 3 --json --prompt-cache "$2" 2>/dev/null || true
}
field() { python3 -c "import json, sys; d = json.load(sys.stdin); print(d.get('$1', ''))"; }

prompt="Once upon a time there"
cold=$(generate "$prompt" "$work/unused" | field generated_tokens)
wrong=0 not_hit=0 healed=0
for ((i = 1; i <= runs; i++)); do
  cache=$work/c$i
  if ((i % 2 == 0)); then generate "Lily had a ball" "$cache" >/dev/null; fi
  "$accord" generate --model "$shared/models/stories260K.bin" --tokenizer "$shared/models/tok512.bin" \
    --prompt "$prompt" --temperature 0 --max-tokens 12 --ranks 3 --json --prompt-cache "$cache" >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '0.%06d' $(((RANDOM * 32768 + RANDOM) % max_delay_us)))"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for attempt in 1 2; do
    out=$(generate "$prompt" "$cache")
    [ "$(field generated_tokens <<<"$out")" = "$cold" ] || wrong=$((wrong + 1))
    if ((attempt == 1)) && [ -n "$(field prompt_cache_recovery <<<"$out")" ]; then healed=$((healed + 1)); fi
    if ((attempt == 2)) && [ "$(field prompt_cache <<<"$out")" != hit ]; then not_hit=$((not_hit + 1)); fi
  done
  rm -rf "$cache"
done
echo "runs=$runs wrong_tokens=$wrong not_hit_on_second_run=$not_hit healed_on_open=$healed"
