#!/usr/bin/env bash
# Resident memory of `accord serve` with many slots of a long context,
# after one short request: issue #50's goal (under 1 GB for 16 slots of
# 131072 positions of a 15M model), against the whole-context F32 cache
# each slot used to reserve.
#
#   bench/kv_memory.sh ACCORD > table.md
#
# Environment: SLOTS (default 16), CTX (default 131072), KV_TYPE (f32).
# Writes a 15M-shaped model (`accord synth`, dim 288, 6 layers, context
# CTX) in a temporary folder, serves it with --parallel SLOTS --ctx-size
# CTX, sends one completion of 16 tokens, and reads the server's VmRSS
# and VmHWM from /proc. Prints a markdown table.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
accord=$1
slots=${SLOTS:-16} ctx=${CTX:-131072} kv_type=${KV_TYPE:-f32}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$accord" synth --dim 288 --hidden 768 --layers 6 --heads 6 --kv-heads 6 --vocab 512 --seq "$ctx" \
  --out "$work/m.bin" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$accord" serve --model "$work/m.bin" --tokenizer "$work/m.tokenizer.bin" --listen "127.0.0.1:$port" \
  --parallel "$slots" --ctx-size "$ctx" --kv-type "$kv_type" --threads 2 --log-level warn >/dev/null &
server_pid=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' >/dev/null
field() { awk -v f="$1:" '$1 == f { print $2 * 1024 }' "/proc/$server_pid/status"; }
rss=$(field VmRSS) hwm=$(field VmHWM)
# 2 (keys, values) x 6 layers x 288 x 4 bytes a position, per slot.
whole=$(( slots * ctx * 2 * 6 * 288 * 4 ))
mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1e6 }'; }
echo "| slots | context | KV type | resident MB after one request | peak MB | whole-context F32 caches MB |"
echo "|---|---|---|---|---|---|"
echo "| $slots | $ctx | $kv_type | $(mb "$rss") | $(mb "$hwm") | $(mb "$whole") |"
