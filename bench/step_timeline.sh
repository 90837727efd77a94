#!/usr/bin/env bash
# Where a pipelined decode step's time goes, from the binary as
# built, without a line of code added: perf uprobes time each rank's
# compute (RankWorker::run_units, entry and return), the output owner's
# pick (RankWorker::sample's return) and the coordinator's reply to the
# caller (TransactionDriver::deliver), across every process of the binary.
#   bench/step_timeline.sh [BUILD_DIR] [SHAPE] [RUN] [TOKENS] [THREADS]
# SHAPE: 15M or 110M (default 110M); RUN: ranks:N (in-process ranks, the
# default ranks:3) or nodes:N (N `accord node` processes on loopback).
# Needs root (uprobes) and perf (Debian: linux-perf). Prints the medians
# over the run's decode steps:
#   compute      a rank's units, from its first kernel to its last
#   hand-over    the last kernel of one rank to the first of the next
#   boundary     the output owner's pick to rank 0's first kernel of the
#                next step, and within it the pick to the caller's reply
#                (the statuses, the agreement) and the reply to rank 0's
#                first kernel (the commit and the next begin)
# The probes cost a few microseconds each, 7 a step; the tok/s printed is
# the probed run's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
accord=$(realpath "${1:-$root/build}/apps/accord")
shape=${2:-110M}
run=${3:-ranks:3}
tokens=${4:-64}
threads=${5:-2}
source "$root/scripts/nodes.sh"
use_scratch_folder
command -v perf >/dev/null || { echo "step_timeline.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }

# The probes sit on function addresses: names of C++ overloads do not
# survive perf's parser.
address() { nm -C "$accord" | awk -v name=" T $1" 'index($0, name) && !seen++ { sub(/^0+/, "", $1); print $1 }'; }
add_probe() { perf probe -q -x "$accord" -a "$1" || { echo "step_timeline.sh: cannot add probe $1" >&2; exit 1; }; }
remove_probes() { perf probe -q -d 'probe_accord:*' 2>/dev/null || true; }
remove_probes
trap 'remove_probes; clean_scratch_folder' EXIT
units=$(address "accord::RankWorker::run_units(")
sample=$(address "accord::RankWorker::sample(")
deliver=$(address "accord::TransactionDriver::deliver(")
add_probe "units_in=0x$units"
add_probe "units_out=0x$units%return"
add_probe "sampled=0x$sample%return"
add_probe "reply=0x$deliver"

synth_shape "$accord" "$shape" "$work/model.bin"
count=${run#*:}
case $run in
  ranks:*) placement=(--ranks "$count") ;;
  nodes:*)
    start_nodes "$accord" "$work" "$count" --model "$work/model.bin"
    placement=(--peers "$(IFS=,; echo "${peers[*]}")")
    ;;
  *) echo "step_timeline.sh: RUN is ranks:N or nodes:N, not $run" >&2; exit 1 ;;
esac

perf record -q -m 1024 -a -e 'probe_accord:*' -o "$work/perf.data" -- \
  "$accord" generate --model "$work/model.bin" --prompt "Once upon a time" --temperature 0 \
  --max-tokens "$tokens" --threads "$threads" --json "${placement[@]}" >"$work/run.json"
perf script -i "$work/perf.data" -F time,event 2>/dev/null >"$work/events.txt"

python3 - "$work/events.txt" "$work/run.json" "$shape" "$run" "$threads" <<'EOF'
import json, re, statistics, sys
events = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*([\d.]+):\s+probe_accord:(\w+?)(?:__return)?:', line)
    if m:
        events.append((float(m.group(1)), m.group(2)))
events.sort()
compute, handovers, boundaries, to_reply, after_reply = [], [], [], [], []
started = None     # the running rank's first kernel
finished = None    # the last rank's last kernel, and whether it sampled
reply = None
for time, name in events:
    if name == "units_in":
        if finished is not None:
            gap = time - finished[0]
            if finished[1]:
                boundaries.append(gap)
                if reply is not None:
                    to_reply.append(reply - finished[0])
                    after_reply.append(time - reply)
            else:
                handovers.append(gap)
        started, finished, reply = time, None, None
    elif name == "units_out" and started is not None:
        compute.append(time - started)
        finished, started = [time, False], None
    elif name == "sampled" and finished is not None:
        finished[1] = True
    elif name == "reply" and finished is not None and finished[1]:
        reply = time
result = json.load(open(sys.argv[2]))
us = lambda values: "%.0f us" % (statistics.median(values) * 1e6) if values else "-"
print("%s, %s, %s threads: %.1f tok/s (probed), %d decode steps"
      % (sys.argv[3], sys.argv[4], sys.argv[5], result["decode_tokens_per_second"], len(boundaries)))
print("| part of a step | median |")
print("|---|---|")
print("| compute, a rank | %.2f ms |" % (statistics.median(compute) * 1e3))
print("| hand-over | %s |" % us(handovers))
print("| boundary | %s |" % us(boundaries))
print("| - pick to the caller's reply | %s |" % us(to_reply))
print("| - reply to rank 0's first kernel | %s |" % us(after_reply))
EOF
