# Sourced, not run: starts `accord node` processes on loopback, and writes
# the synthetic models the benchmarks run them on.
#   start_nodes ACCORD LOG_DIR COUNT [node options...]
# Each node listens on 127.0.0.1 port 0 (it picks a free port and prints
# it); on return `peers` holds their HOST:PORT in rank order and `pids`
# their process ids. The caller stops them (a trap on EXIT).
start_nodes() {
  local accord=$1 logs=$2 count=$3
  shift 3
  peers=()
  pids=()
  local rank address
  for rank in $(seq 0 $((count - 1))); do
    "$accord" node --listen 127.0.0.1:0 "$@" >"$logs/node-$rank.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
      grep -q "listening on" "$logs/node-$rank.log" && break
      sleep 0.1
    done
    address=$(grep -o "listening on [0-9.]*:[0-9]*" "$logs/node-$rank.log" | cut -d' ' -f3)
    [ -n "$address" ] || { cat "$logs/node-$rank.log"; return 1; }
    peers+=("$address")
  done
}

# Sets `work` to a new scratch folder and `pids` to none; on exit the nodes
# in `pids` are stopped and the folder removed (clean_scratch_folder).
use_scratch_folder() {
  work=$(mktemp -d)
  pids=()
  trap clean_scratch_folder EXIT
}

clean_scratch_folder() {
  # A node stopped (SIGSTOP) takes the TERM only once it runs again.
  kill "${pids[@]}" 2>/dev/null || true
  kill -CONT "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}

# Writes the synthetic model of llama2.c's 15M or 110M shape to OUT.
#   synth_shape ACCORD 15M|110M OUT
synth_shape() {
  local accord=$1 shape=$2 out=$3
  case $shape in
    15M) "$accord" synth --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 32000 --seq 256 --out "$out" ;;
    110M) "$accord" synth --dim 768 --hidden 2048 --layers 12 --heads 12 --vocab 32000 --seq 1024 --out "$out" ;;
    *) echo "synth_shape: no shape $shape" >&2; return 1 ;;
  esac >/dev/null
}
