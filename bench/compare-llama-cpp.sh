#!/usr/bin/env bash
# Side-by-side CPU speed of accord and llama.cpp on the same GGUF files
# (bench/README.md, "Against llama.cpp"): decode tg64 and prefill pp128,
# 1 and 2 threads.
#
#   bench/compare-llama-cpp.sh LLAMA_BENCH ACCORD MODEL_DIR [RUNS] > table.md
#
# LLAMA_BENCH  llama.cpp's llama-bench (CPU backend)
# ACCORD       the accord binary to measure (copy it first if a build may
#              replace it during the run)
# MODEL_DIR    GGUF models named *-f32.gguf, *-f16.gguf, *-q8_0.gguf,
#              *-q4_0.gguf, *-bf16.gguf, *-q4_k_m.gguf, *-q6_k.gguf (e.g. from `accord synth` then `accord convert
#              --type T`); every precision found is measured
# RUNS         measurements of each cell (default 3); the table shows the
#              median and, in brackets, the smallest and largest
#
# Environment: THREADS (default "1 2"); LLAMA_BENCH_ARGS, extra llama-bench
# options (e.g. "-ctk f32 -ctv f32"); LLAMA_CPP_COMMIT, the llama.cpp commit
# to print when llama-bench does not know its own (a build outside git);
# QUIET_WAIT_S (default 120): before each measurement wait up to this long for
# the other processes of the machine to use less than QUIET_CORES (default
# 0.3) cores, 0 = do not wait; QUIET_BUDGET_S (default 1800): the most waiting
# of the whole run, after which measurements start at once. Measurements
# during which, or just before which, other processes used QUIET_CORES or more
# are counted in the table ("busy" column).
#
# What each side runs, with T threads:
#   llama.cpp tg64:  llama-bench -m M -p 0 -n 64 -t T -r 1 -o json
#   llama.cpp pp128: llama-bench -m M -p 128 -n 0 -t T -r 1 -o json
#     (llama-bench runs one untimed warm-up of each test first; its KV cache
#     is f16 by default, flash attention off)
#   accord tg64:  generate --prompt "" --max-tokens 65 --temperature 0: BOS is
#     prefilled, then 64 decode steps; decode_tokens_per_second (no warm-up)
#   accord pp128: generate --prompt P --max-tokens 1 --temperature 0, P
#     encoding to 128 tokens with BOS; prefill_tokens_per_second (the batched
#     prompt forward and the first token's sampling)
# The runs alternate: for each run, model and thread count, llama.cpp tg64,
# accord tg64, llama.cpp pp128, accord pp128. Progress goes to stderr, the
# markdown table to stdout.
set -euo pipefail

if [[ $# -lt 3 || $# -gt 4 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
llama_bench=$1
accord=$2
model_dir=$3
runs=${4:-3}
threads_list=${THREADS:-1 2}
llama_args=${LLAMA_BENCH_ARGS:-}
quiet_wait_s=${QUIET_WAIT_S:-120}
quiet_cores=${QUIET_CORES:-0.3}
quiet_budget_s=${QUIET_BUDGET_S:-1800}
waited_total=0

[[ -x $llama_bench ]] || { echo "not executable: $llama_bench" >&2; exit 2; }
[[ -x $accord ]] || { echo "not executable: $accord" >&2; exit 2; }
[[ -d $model_dir ]] || { echo "not a folder: $model_dir" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer: $runs" >&2; exit 2; }

models=()
for precision in f32 f16 bf16 q8_0 q4_0 q4_k_m q6_k; do
  for file in "$model_dir"/*-"$precision".gguf; do
    [[ -f $file ]] && models+=("$file")
  done
done
[[ ${#models[@]} -gt 0 ]] || { echo "no *-{f32,f16,bf16,q8_0,q4_0,q4_k_m,q6_k}.gguf in $model_dir" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv # engine test model threads run tok_s busy_before busy_during
: >"$results"

# Busy jiffies of the whole machine so far (/proc/stat: user, nice, system,
# irq, softirq; not idle, iowait or steal). Bash only: no process of its own.
busy_jiffies() {
  local user nice system irq softirq _
  read -r _ user nice system _ _ irq softirq _ </proc/stat
  echo $((user + nice + system + irq + softirq))
}

# Runs a command under /usr/bin/time and writes to $work/during the cores
# that other processes kept busy meanwhile: the machine's busy time less the
# command's own CPU time (spinning threads included), over its wall time.
measured() {
  local before after rc=0
  before=$(busy_jiffies)
  /usr/bin/time -f '%e %U %S' -o "$work/time" "$@" || rc=$?
  after=$(busy_jiffies)
  python3 -c '
import os, sys
before, after, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
wall, user, system = map(float, open(path).read().split()[-3:])
hz = os.sysconf("SC_CLK_TCK")
print("%.2f" % max(0.0, ((after - before) / hz - user - system) / max(wall, 1e-3)))' \
    "$before" "$after" "$work/time" >"$work/during" 2>/dev/null || echo 0 >"$work/during"
  return "$rc"
}

# Cores the rest of the machine keeps busy, over one second (/proc/stat).
busy_cores() {
  python3 - <<'EOF'
import os, time
def sample():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]
t0, i0 = sample(); time.sleep(1); t1, i1 = sample()
print("%.2f" % ((1 - (i1 - i0) / max(t1 - t0, 1)) * os.cpu_count()))
EOF
}

# Waits for a quiet machine (QUIET_WAIT_S at most, QUIET_BUDGET_S in all);
# sets busy to the last load seen.
wait_quiet() {
  local waited=0
  busy=$(busy_cores)
  while python3 -c "import sys; sys.exit(not $busy >= $quiet_cores)" &&
    ((waited < quiet_wait_s && waited_total < quiet_budget_s)); do
    sleep 4
    waited=$((waited + 5))
    waited_total=$((waited_total + 5))
    busy=$(busy_cores)
  done
}

# llama-bench JSON on stdin: the tokens/s of its only test.
parse_llama() {
  python3 -c '
import json, sys
r = json.load(sys.stdin)
assert len(r) == 1, "expected one test, got %d" % len(r)
print(r[0]["avg_ts"])'
}

llama_run() { # test model threads
  local test=$1 model=$2 threads=$3 p n
  if [[ $test == tg64 ]]; then p=0 n=64; else p=128 n=0; fi
  # shellcheck disable=SC2086 # LLAMA_BENCH_ARGS is a list of options
  if ! measured "$llama_bench" -m "$model" -p "$p" -n "$n" -t "$threads" -r 1 -o json $llama_args \
    >"$work/llama.json" 2>"$work/llama.err"; then
    cat "$work/llama.err" >&2
    echo "llama-bench failed on $model" >&2
    exit 1
  fi
  parse_llama <"$work/llama.json"
}

# accord generate --json on stdin: one field, after checks of the run's shape.
parse_accord() { # test
  python3 -c '
import json, sys
test = sys.argv[1]
r = json.load(sys.stdin)
if r.get("error"):
    sys.exit("accord: " + r["error"])
if test == "tg64":
    if r["decode_steps"] != 64:
        print("warning: %d decode steps instead of 64 (stop: %s)" % (r["decode_steps"], r["stop_reason"]), file=sys.stderr)
    print(r["decode_tokens_per_second"])
else:
    n = len(r["prompt_tokens"])
    if n != 128:
        sys.exit("the prompt is %d tokens, not 128" % n)
    print(r["prefill_tokens_per_second"])' "$1"
}

accord_run() { # test model threads
  local test=$1 model=$2 threads=$3
  local -a args=(generate --model "$model" --temperature 0 --threads "$threads" --json)
  if [[ $test == tg64 ]]; then
    args+=(--max-tokens 65)
  else
    args+=(--prompt "$(cat "$work/prompt.$(basename "$model")")" --max-tokens 1)
  fi
  if ! measured "$accord" "${args[@]}" >"$work/accord.json" 2>"$work/accord.err"; then
    cat "$work/accord.err" "$work/accord.json" >&2
    echo "accord failed on $model" >&2
    exit 1
  fi
  parse_accord "$test" <"$work/accord.json"
}

# A prompt of 128 tokens with BOS for this model's tokenizer: single letters
# and spaces ("a b c ..."), one token each with the synthetic vocabulary;
# the count is measured and corrected, never assumed.
make_prompt() { # model
  local model=$1 letters=127 n
  for _ in 1 2 3 4 5 6; do
    python3 -c 'import string, sys; n = int(sys.argv[1]); print(" ".join(string.ascii_lowercase[i % 26] for i in range(n)))' \
      "$letters" >"$work/prompt.$(basename "$model")"
    "$accord" generate --model "$model" --prompt "$(cat "$work/prompt.$(basename "$model")")" --max-tokens 1 \
      --temperature 0 --threads 1 --json >"$work/accord.json" 2>"$work/accord.err" ||
      { cat "$work/accord.err" >&2; exit 1; }
    n=$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["prompt_tokens"]))' <"$work/accord.json")
    [[ $n -eq 128 ]] && return 0
    letters=$((letters + 128 - n))
    ((letters > 0)) || break
  done
  echo "could not make a 128-token prompt for $model (last: $n tokens)" >&2
  exit 1
}

for model in "${models[@]}"; do make_prompt "$model"; done

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
total=$((runs * ${#models[@]} * $(wc -w <<<"$threads_list") * 4))
done_count=0
for run in $(seq 1 "$runs"); do
  for model in "${models[@]}"; do
    name=$(basename "$model" .gguf)
    for threads in $threads_list; do
      for test in tg64 pp128; do
        for engine in llama.cpp accord; do
          wait_quiet
          if [[ $engine == llama.cpp ]]; then
            rate=$(llama_run "$test" "$model" "$threads")
          else
            rate=$(accord_run "$test" "$model" "$threads")
          fi
          during=$(cat "$work/during")
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$engine" "$test" "$name" "$threads" "$run" "$rate" "$busy" \
            "$during" >>"$results"
          done_count=$((done_count + 1))
          printf '[%d/%d] run %d %s t=%s %s %s: %.2f tok/s (other processes: %s cores before, %s during)\n' \
            "$done_count" "$total" "$run" "$name" "$threads" "$test" "$engine" "$rate" "$busy" "$during" >&2
        done
      done
    done
  done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
accord_sum=$(sha256sum "$accord" | cut -c1-12)
llama_build=$(python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["build_commit"])' <"$work/llama.json")
[[ $llama_build == unknown && -n ${LLAMA_CPP_COMMIT:-} ]] && llama_build=$LLAMA_CPP_COMMIT
python3 - "$results" "$runs" "$quiet_cores" <<EOF
import collections, statistics, sys
path, runs, quiet = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
cells = collections.defaultdict(list)
busy_cells = collections.Counter()
order, busy_starts = [], 0
for line in open(path):
    engine, test, model, threads, run, rate, before, during = line.rstrip("\n").split("\t")
    busy = max(float(before), float(during))
    key = (model, test, int(threads))
    if key not in order:
        order.append(key)
    cells[key + (engine,)].append(float(rate))
    busy_starts += float(busy) >= quiet
    busy_cells[key] += float(busy) >= quiet
print("## accord vs llama.cpp, CPU")
print()
print("- started: $started, cpu: $cpu, $(nproc) logical cores")
print("- llama.cpp: $llama_bench (build %s)%s" % ("$llama_build", " $llama_args" if "$llama_args" else ""))
print("- accord: $accord (sha256 $accord_sum)")
print("- runs per cell: %d, median (min-max) tokens/s; measurements during which (or just before which)"
      " other processes used %.2g cores or more: %d of %d (waited %d s for a quiet machine)"
      % (runs, quiet, busy_starts, sum(len(v) for v in cells.values()), $waited_total))
print()
print("| model | test | threads | llama.cpp tok/s | accord tok/s | accord / llama.cpp | busy |")
print("|---|---|---:|---:|---:|---:|---:|")
def cell(v):
    return "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))
models = list(dict.fromkeys(k[0] for k in order))
for model, test, threads in sorted(order, key=lambda k: (models.index(k[0]), k[1] != "tg64", k[2])):
    l, a = cells[(model, test, threads, "llama.cpp")], cells[(model, test, threads, "accord")]
    print("| %s | %s | %d | %s | %s | %.3f | %d/%d |" % (
        model, test, threads, cell(l), cell(a), statistics.median(a) / statistics.median(l),
        busy_cells[(model, test, threads)], len(l) + len(a)))
EOF
