#!/usr/bin/env bash
# accord serve's prefix reuse (docs/serve.md, "Prefix reuse"): the time to
# first token of a long prompt on an empty slot, then of the same prompt
# with a few words more on the slot that holds it (a chat's next turn), with
# the prompt tokens each prefilled; then the same two requests with
# --no-prefix-reuse. Prints a Markdown table.
#
#   bench/prefix_reuse.sh ACCORD [MODEL [TOKENIZER]]
#
# Without MODEL it synthesizes the 15M shape (`accord synth`, dim 288, 6
# layers) with a context of SEQ (default 1024) tokens in a temporary folder.
# Environment: WORDS (default 120) words of prompt; THREADS (default: all
# cores); RUNS (default 3) pairs of requests per server, each pair on a
# fresh prompt (the best time of each is printed).
set -euo pipefail
if [[ $# -lt 1 || $# -gt 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
accord=$1 model=${2:-} tokenizer=${3:-}
words=${WORDS:-120} threads=${THREADS:-$(nproc)} runs=${RUNS:-3} seq=${SEQ:-1024}
folder=$(mktemp -d)
server_pid=
stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
trap 'stop_server; rm -rf "$folder"' EXIT
if [[ -z $model ]]; then
  model=$folder/synth15m.bin tokenizer=$folder/synth15m.tokenizer.bin
  "$accord" synth --seq "$seq" --out "$model" >/dev/null
fi

# serve [OPTIONS...]: starts accord serve; sets url.
serve() {
  "$accord" serve --model "$model" ${tokenizer:+--tokenizer "$tokenizer"} --listen 127.0.0.1:0 --threads "$threads" \
    --log-level warn "$@" >"$folder/serve.out" &
  server_pid=$!
  for _ in $(seq 600); do
    if grep -q "serving on" "$folder/serve.out"; then
      url=$(sed -n 's/.*serving on //p' "$folder/serve.out")
      return
    fi
    sleep 0.1
  done
  echo "accord serve did not start" >&2
  exit 1
}

measure() {  # URL LABEL
  python3 - "$1" "$2" "$words" "$runs" "$(basename "${model%.*}")" <<'EOF'
import http.client, json, sys, time, urllib.parse
url, label, words, runs, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
host = urllib.parse.urlparse(url)
vocabulary = "the cat dog sun tree ran saw big little happy sad red blue home park day night friend".split()

def first_token(prompt):
    """Seconds to the stream's first chunk (the first piece, or the finish when
    the model stops at once), and the usage the stream ends with."""
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    connection = http.client.HTTPConnection(host.hostname, host.port, timeout=600)
    started = time.monotonic()
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    reply = connection.getresponse()
    if reply.status != 200:
        sys.exit(f"status {reply.status}: {reply.read().decode()}")
    first, usage = None, None
    for line in reply:
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        if first is None:
            first = time.monotonic() - started
        usage = chunk.get("usage") or usage
    connection.close()
    return first, usage

best = {}
for run in range(runs):
    words_of = [vocabulary[(run * 7 + i * 5 + i // 3) % len(vocabulary)] for i in range(words)]
    prompt = f"Story {run}: " + " ".join(words_of)
    for turn, text in (("first", prompt), ("next turn", prompt + " and then they went home")):
        seconds, usage = first_token(text)
        prefilled = usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
        if turn not in best or seconds < best[turn][0]:
            best[turn] = (seconds, usage["prompt_tokens"], prefilled)
for turn, (seconds, prompt_tokens, prefilled) in best.items():
    print(f"| {label} | {turn} | {prompt_tokens} | {prefilled} | {seconds * 1000:.1f} |")
EOF
}

echo "| server | request | prompt tokens | prefilled | time to first token (ms) |"
echo "|---|---|---|---|---|"
serve
measure "$url" "accord serve"
stop_server
serve --no-prefix-reuse
measure "$url" "accord serve --no-prefix-reuse"
stop_server
