#!/usr/bin/env bash
# Resident memory of `accord generate` against issue #49's bound: the
# model file, plus the session's keys and values, plus 64 MB.
#
#   bench/memory.sh ACCORD MODEL.gguf... > table.md
#
# For each file: `accord generate --prompt "Once upon a time" --max-tokens 16
# --temperature 0 --threads 1 --json` under GNU time (/usr/bin/time -f %M:
# the process's peak resident set). The session's keys and values are the
# JSON report's kv_bytes_capacity (every position of --ctx-size's default,
# at most: the cache is paged and holds only the positions used). Prints a markdown table: file bytes,
# KV bytes, peak resident bytes, the bound and the margin under it.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
accord=$1
shift
[[ -x /usr/bin/time ]] || { echo "needs GNU time (/usr/bin/time, Debian package time)" >&2; exit 2; }
[[ -x $accord ]] || { echo "not executable: $accord" >&2; exit 2; }

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

echo "| file | file MB | KV MB | peak resident MB | bound MB | under the bound by MB |"
echo "|---|---|---|---|---|---|"
for model in "$@"; do
  out=$(mktemp)
  /usr/bin/time -o "$out.time" -f %M "$accord" generate --model "$model" --prompt "Once upon a time" \
    --max-tokens 16 --temperature 0 --threads 1 --json > "$out"
  file_bytes=$(stat -c %s "$model")
  kv_bytes=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["report"]["kv_bytes_capacity"])' "$out")
  peak_bytes=$(( $(tail -1 "$out.time") * 1024 ))
  bound=$(( file_bytes + kv_bytes + 64000000 ))
  echo "| $(basename "$model") | $(mb "$file_bytes") | $(mb "$kv_bytes") | $(mb "$peak_bytes") | $(mb "$bound") | $(mb $(( bound - peak_bytes ))) |"
  rm -f "$out" "$out.time"
done
