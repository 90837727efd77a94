#!/usr/bin/env bash
# Issue #50's shared-prefix goal, side by side (bench/shared_prefix.py):
# REQUESTS (64) completions, CONCURRENCY (8) at a time, each a system
# prompt of SYSTEM_WORDS (400) words shared by all plus a question of
# QUESTION_WORDS (8) words, TOKENS (64) greedy tokens each; then the time
# to first token of a request alone, cold and on the cached system prompt.
# SYSTEMS (default 1) system prompts take turns, request by request: more
# of them than CONCURRENCY is many conversations on few slots.
# (In the vocabulary of `accord synth`'s models 400 words are 1036 tokens
# and 8 words 22: the issue's 1,000-token prompt and 20-token question.)
#
#   bench/shared_prefix.sh ACCORD MODEL.gguf [LLAMA_SERVER] > table.md
#
# Servers, alternating, RUNS (default 5) times: accord serve --parallel
# CONCURRENCY (slots keep their prefix and share kept prompts);
# accord serve --prefix-store-entries 0 (each slot keeps only its own
# prefix); llama-server -np CONCURRENCY (its default prompt cache) when
# given; and BASELINE_RUNS (default 2) times
# accord serve --no-prefix-reuse (each request prefilled whole, as accord
# served before prefix reuse). THREADS (default: all cores), CTX (default
# 2048) positions a slot holds; RESULTS, a file that keeps each run's
# figures as they come (default: a temporary one).
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
accord=$1 model=$2 llama_server=${3:-}
requests=${REQUESTS:-64} concurrency=${CONCURRENCY:-8} tokens=${TOKENS:-64} system_words=${SYSTEM_WORDS:-400}
question_words=${QUESTION_WORDS:-8} systems=${SYSTEMS:-1} runs=${RUNS:-5} baseline_runs=${BASELINE_RUNS:-2}
threads=${THREADS:-$(nproc)} ctx=${CTX:-2048}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model_id=$(basename "${model%.*}")
server_pid=
stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
trap stop_server EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {
  for _ in $(seq 600); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.5; done
  echo "no /health from $1" >&2
  return 1
}
load() {  # PORT
  python3 "$here/shared_prefix.py" "http://127.0.0.1:$1" "$model_id" "$requests" "$concurrency" "$tokens" \
    "$system_words" "$question_words" "$systems"
}
run_accord() {  # EXTRA_OPTIONS...
  local port
  port=$(free_port)
  "$accord" serve --model "$model" --listen "127.0.0.1:$port" --parallel "$concurrency" --threads "$threads" \
    --ctx-size "$ctx" --log-level warn "$@" >/dev/null &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  load "$port"
  stop_server
}
run_llama() {
  local port
  port=$(free_port)
  "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -np "$concurrency" -c $((concurrency * ctx)) \
    -t "$threads" --log-disable >/dev/null 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  load "$port"
  stop_server
}

results=${RESULTS:-$(mktemp)}
for run in $(seq "$runs"); do
  echo "run $run of $runs" >&2
  figures=$(run_accord) && echo "accord $figures" >> "$results"
  figures=$(run_accord --prefix-store-entries 0) && echo "nostore $figures" >> "$results"
  if [[ -n $llama_server ]]; then figures=$(run_llama) && echo "llama $figures" >> "$results"; fi
  if [[ $run -le $baseline_runs ]]; then
    figures=$(run_accord --no-prefix-reuse) && echo "baseline $figures" >> "$results"
  fi
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, figures = line.split(" ", 1)
    rows.setdefault(name, []).append(json.loads(figures))
def cell(values, digits=1):
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
names = {"accord": "accord serve", "nostore": "accord serve --prefix-store-entries 0", "llama": "llama-server",
         "baseline": "accord serve --no-prefix-reuse"}
print("| server | runs | tokens/s | cold first token s | cached first token s | cached / cold |")
print("|---|---|---|---|---|---|")
for name in ("accord", "nostore", "llama", "baseline"):
    if name not in rows:
        continue
    r = rows[name]
    print(f"| {names[name]} | {len(r)} | {cell([x['tokens_per_second'] for x in r])} | "
          f"{cell([x['cold_first_token_seconds'] for x in r], 3)} | {cell([x['cached_first_token_seconds'] for x in r], 3)} | "
          f"{cell([x['cached_first_token_seconds'] / x['cold_first_token_seconds'] for x in r], 3)} |")
for other in ("nostore", "llama", "baseline"):
    if other in rows:
        n = min(len(rows["accord"]), len(rows[other]))
        ratios = [rows["accord"][i]["tokens_per_second"] / rows[other][i]["tokens_per_second"] for i in range(n)]
        print(f"\naccord / {names[other]} tokens/s, run by run: {cell(ratios, 2)}")
PY
[[ -n ${RESULTS:-} ]] || rm -f "$results"
