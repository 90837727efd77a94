#!/usr/bin/env bash
# accord serve against llama.cpp's llama-server (docs/serve.md), side by side:
# aggregate tokens/s of STREAMS concurrent greedy completions, and the time
# to first token of one request alone against `accord generate`'s prefill.
#
#   bench/serve.sh ACCORD MODEL.gguf [LLAMA_SERVER] > table.md
#
# Environment: STREAMS (default 8) sequences at once (accord --parallel,
# llama-server -np); TOKENS (default 64) per completion; RUNS (default 3),
# alternating the two servers; THREADS (default: all cores); PROMPT.
# llama-server is built by hand outside the repository (bench/README.md).
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
accord=$1 model=$2 llama_server=${3:-}
streams=${STREAMS:-8} tokens=${TOKENS:-64} runs=${RUNS:-3} threads=${THREADS:-$(nproc)}
prompt=${PROMPT:-"Once upon a time there was a little robot who wanted to learn how to paint the sea at night"}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model_id=$(basename "${model%.*}")
server_pid=

stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
trap stop_server EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() {  # URL
  for _ in $(seq 600); do
    if curl -sf "$1/health" >/dev/null; then return 0; fi
    sleep 0.5
  done
  echo "no /health from $1" >&2
  return 1
}

run_accord() {
  local port
  port=$(free_port)
  "$accord" serve --model "$model" --listen "127.0.0.1:$port" --parallel "$streams" --threads "$threads" \
    --log-level warn >/dev/null &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  python3 "$here/serve_load.py" "http://127.0.0.1:$port" "$model_id" "$streams" "$tokens" "$prompt"
  stop_server
}

run_llama() {
  local port context
  port=$(free_port)
  context=$("$accord" inspect "$model" | sed -n 's/.*seq_len[ =:]*\([0-9]*\).*/\1/p' | head -1)
  "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -np "$streams" -c $((streams * context)) \
    -t "$threads" --log-disable >/dev/null 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  python3 "$here/serve_load.py" "http://127.0.0.1:$port" "$model_id" "$streams" "$tokens" "$prompt"
  stop_server
}

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

echo "| run | accord tok/s | llama-server tok/s | ratio | accord TTFT ms | generate prefill ms | TTFT / prefill |"
echo "|---|---|---|---|---|---|---|"
for run in $(seq "$runs"); do
  accord_json=$(run_accord)
  llama_tps="-" ratio="-"
  if [[ -n $llama_server ]]; then
    llama_json=$(run_llama)
    llama_tps=$(field "$llama_json" tokens_per_second)
    ratio=$(python3 -c "print(f'{$(field "$accord_json" tokens_per_second) / $llama_tps:.2f}')")
    llama_tps=$(printf %.1f "$llama_tps")
  fi
  prefill=$("$accord" generate --model "$model" --prompt "$prompt" --max-tokens 1 --temperature 0 \
    --threads "$threads" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['prefill_seconds'])")
  ttft=$(field "$accord_json" first_token_seconds)
  python3 - "$run" "$(field "$accord_json" tokens_per_second)" "$llama_tps" "$ratio" "$ttft" "$prefill" <<'PY'
import sys
run, tps, llama, ratio, ttft, prefill = sys.argv[1:]
print(f"| {run} | {float(tps):.1f} | {llama} | {ratio} | {float(ttft) * 1e3:.1f} | {float(prefill) * 1e3:.1f} | "
      f"{float(ttft) / float(prefill):.2f} |")
PY
done
