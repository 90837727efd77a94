#!/usr/bin/env bash
# Decode speed after a long context, accord beside llama.cpp: issue #50's
# goal for `--kv-type f16` (decode at 1000 tokens of context >= 1.0x
# llama-bench -d 1000 with its default F16 cache).
#
#   bench/kv_depth.sh LLAMA_BENCH ACCORD MODEL.gguf [RUNS] > table.md
#
# Environment: DEPTH (default 1000) tokens of context before the timed
# decode; TOKENS (default 64) decode steps timed; THREADS (default 2);
# KV_TYPES (default "f32 f16"), accord's cache types to measure.
#
# What each side runs (RUNS times, default 5, alternating):
#   llama.cpp: llama-bench -m M -p 0 -n TOKENS -d DEPTH -t THREADS -r 1 -o json
#   accord:    generate --prompt P --max-tokens TOKENS+1 --temperature 0
#              --kv-type T --ctx-size DEPTH+TOKENS+8, P a text of DEPTH
#              tokens; decode_tokens_per_second of its --json (the decode
#              steps after the prompt's prefill)
# Prints the median tokens/s of each with its range, and accord's ratio to
# llama.cpp (median of the per-run ratios, with their range).
set -euo pipefail
if [[ $# -lt 3 || $# -gt 4 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
llama_bench=$1 accord=$2 model=$3 runs=${4:-5}
depth=${DEPTH:-1000} tokens=${TOKENS:-64} threads=${THREADS:-2} kv_types=${KV_TYPES:-"f32 f16"}

# A prompt of exactly `depth` tokens: BOS and depth - 1 words of one token
# each in the vocabularies of llama2.c's tokenizers (" a" after the first).
prompt=$(python3 -c "print(' '.join(['a'] * ($depth - 1)))")
count=$("$accord" tokenize --model "$model" --text "$prompt" --json |
  python3 -c 'import json, sys; print(len(json.load(sys.stdin)["ids"]))')
[[ $count -eq $depth ]] || { echo "the prompt is $count tokens, not $depth" >&2; exit 1; }

llama_run() {
  "$llama_bench" -m "$model" -p 0 -n "$tokens" -d "$depth" -t "$threads" -r 1 -o json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
accord_run() {  # KV_TYPE
  "$accord" generate --model "$model" --prompt "$prompt" --max-tokens $((tokens + 1)) --temperature 0 \
    --kv-type "$1" --ctx-size $((depth + tokens + 8)) --threads "$threads" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_second"])'
}

declare -A figures
for run in $(seq "$runs"); do
  echo "run $run of $runs" >&2
  llama=$(llama_run)
  figures[llama]+="$llama "
  for kv in $kv_types; do
    got=$(accord_run "$kv")
    figures[$kv]+="$got "
    figures[ratio_$kv]+="$(python3 -c "print($got / $llama)") "
  done
done

summary() {  # VALUES...
  python3 -c 'import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")' "$@"
}
echo "| $(basename "$model"), depth $depth, tg$tokens, $threads threads | tokens/s median (range) | ratio to llama.cpp |"
echo "|---|---|---|"
# shellcheck disable=SC2086
echo "| llama.cpp (F16 cache) | $(summary ${figures[llama]}) | 1 |"
for kv in $kv_types; do
  # shellcheck disable=SC2086
  echo "| accord --kv-type $kv | $(summary ${figures[$kv]}) | $(summary ${figures[ratio_$kv]}) |"
done
