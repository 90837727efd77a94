#!/usr/bin/env bash
# What a rank holds of the model (docs/residency.md), on the
# synthetic 110M shape, all in one run so the ratios share the machine's
# state:
# - peak RSS of a one-process run, of each of 3 `accord node` processes
#   (read from /proc/PID/status VmHWM after the session) and of their
#   client, which reads no weights;
# - decode with --max-resident-bytes at a quarter of the weights against
#   what the page cache can deliver: the re-read bandwidth of the model
#   file, in the cache (dd, median of 3), over the bytes streamed per token;
# - the greedy tokens of every run against the one-process run's.
# Medians of RUNS runs. The identity's cost per shard is accord_bench's
# model_load (bench/README.md), which this prints too when it is built.
#   bench/shard.sh [BUILD_DIR] [RUNS] [TOKENS] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
accord=$build/apps/accord
runs=${2:-3}
tokens=${3:-64}
threads=${4:-2}
source "$root/scripts/nodes.sh"
use_scratch_folder
model=$work/110M.bin
synth_shape "$accord" 110M "$model"
cat "$model" >/dev/null  # in the page cache, as for every run below

# A greedy generation with OPTIONS...: its JSON to OUT, its peak RSS (KiB)
# to OUT.rss.
generate() {
  local out=$1
  shift
  /usr/bin/time -f %M -o "$out.rss" "$accord" generate --model "$model" --temperature 0 --max-tokens "$tokens" \
    --threads "$threads" --json "$@" >"$out"
}
peak_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

weights=$("$accord" generate --model "$model" --max-tokens 1 --json |
  python3 -c "import json,sys; print(json.load(sys.stdin)['report']['weights_bytes'])")
budget=$((weights / 4))
for run in $(seq "$runs"); do
  generate "$work/one.$run"
  pids=()
  start_nodes "$accord" "$work" 3 --model "$model"
  generate "$work/client.$run" --peers "$(IFS=,; echo "${peers[*]}")"
  for rank in 0 1 2; do peak_kib "${pids[$rank]}" >"$work/node$rank.$run.rss"; done
  kill "${pids[@]}" && wait 2>/dev/null || true
  for _ in 1 2 3; do
    dd if="$model" of=/dev/null bs=1M 2>&1 | awk '/copied/ {print $(NF-1), $NF}'
  done >"$work/dd.$run"
  generate "$work/layered.$run" --max-resident-bytes "$budget"
done

python3 - "$work" "$runs" "$weights" "$budget" <<'EOF'
import json, statistics, sys
work, runs, weights, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(name, run): return json.load(open(f"{work}/{name}.{run}"))
def rss(name, run): return int(open(f"{work}/{name}.{run}.rss").read().split()[0]) * 1024
def bandwidth(run):
    to_bytes = {"GB/s": 1e9, "MB/s": 1e6, "kB/s": 1e3}
    rates = [float(v) * to_bytes[unit] for v, unit in (line.split() for line in open(f"{work}/dd.{run}"))]
    return statistics.median(rates)
rows = {key: [] for key in ("one", "client", "node0", "node1", "node2", "plain", "layered", "bw", "streamed", "limit")}
same = True
for run in range(1, runs + 1):
    one, client, layered = load("one", run), load("client", run), load("layered", run)
    same &= client["generated_tokens"] == one["generated_tokens"] == layered["generated_tokens"]
    for key in ("one", "client", "node0", "node1", "node2"): rows[key].append(rss(key, run))
    share = layered["report"]["weight_shares"][0]
    rows["plain"].append(one["decode_tokens_per_second"])
    rows["layered"].append(layered["decode_tokens_per_second"])
    rows["bw"].append(bandwidth(run))
    rows["streamed"].append(share["streamed_bytes_per_step"])
    rows["limit"].append(bandwidth(run) / share["streamed_bytes_per_step"])
m = {key: statistics.median(values) for key, values in rows.items()}
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"weights {mib(weights)}; medians of {runs} runs; tokens {'identical' if same else 'DIFFERENT'} in every run\n")
print("| process | peak RSS | vs one process |\n|---|---|---|")
for key, name in (("one", "one process"), ("node0", "node, rank 0"), ("node1", "node, rank 1"),
                  ("node2", "node, rank 2"), ("client", "client (--peers)")):
    print(f"| {name} | {mib(m[key])} | {m[key] / m['one']:.3f} |")
print(f"\n| decode, --max-resident-bytes {budget} (25% of the weights) | figure |\n|---|---|")
print(f"| full residency | {m['plain']:.1f} tok/s |")
print(f"| layered | {m['layered']:.1f} tok/s |")
print(f"| streamed per token | {mib(m['streamed'])} |")
print(f"| page-cache re-read bandwidth (dd) | {m['bw'] / 1e9:.2f} GB/s |")
print(f"| page-cache limit (bandwidth / streamed per token) | {m['limit']:.1f} tok/s |")
print(f"| layered / limit | {m['layered'] / m['limit']:.2f} |")
EOF

if [ -x "$build/bench/accord_bench" ]; then
  echo
  ACCORD_BENCH_110M=1 "$build/bench/accord_bench" --benchmark_filter='model_load/110M' \
    --benchmark_repetitions="$runs" --benchmark_report_aggregates_only=true 2>&1 | grep -E "Benchmark|median"
fi
