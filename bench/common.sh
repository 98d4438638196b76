# Shared by the bench scripts: build once, make the synthetic data once.
# shellcheck source=bench/help.sh
source "$(dirname "${BASH_SOURCE[0]}")/help.sh"
set -euo pipefail
# The script's flags (its environment variables' names), before anything
# is built; what is left are its positional arguments.
bench_flags "$@"
set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
if [ ! -x build/bin/ctr-train ] || [ "${SS_BENCH_REBUILD:-1}" = 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$JOBS" >/dev/null
fi
mkdir -p out
# The benchmarks time one pass over the rows (ctr-train's default trains
# epochs with early stopping); set SHADOWSYNC_EPOCHS to measure more.
export SHADOWSYNC_EPOCHS=${SHADOWSYNC_EPOCHS:-1}
# Every call carries a token (no listener is open by default): one for
# the benchmarks (0600), read by every PS, agent, trainer and peer.
if [ -z "${SHADOWSYNC_AUTH_TOKEN_FILE:-}" ]; then
  export SHADOWSYNC_AUTH_TOKEN_FILE=$PWD/out/bench-token
  [ -s "$SHADOWSYNC_AUTH_TOKEN_FILE" ] ||
    (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$SHADOWSYNC_AUTH_TOKEN_FILE")
fi
# A PS refuses a token beside SHADOWSYNC_INSECURE_LOOPBACK (the suite's).
unset SHADOWSYNC_INSECURE_LOOPBACK
# The PS fleet's own token (rows moving between shards), read by every PS.
if [ -z "${SHADOWSYNC_PEER_TOKEN_FILE:-}" ]; then
  export SHADOWSYNC_PEER_TOKEN_FILE=$PWD/out/bench-peer-token
  [ -s "$SHADOWSYNC_PEER_TOKEN_FILE" ] ||
    (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$SHADOWSYNC_PEER_TOKEN_FILE")
fi

# make_data ROWS: writes out/train-ROWS.tsv and out/test.tsv if absent.
make_data() {
  local rows=$1
  [ -s "out/train-$rows.tsv" ] ||
    ./build/bin/ctr-gen --rows "$rows" --model-seed 42 --data-seed 1 --out "out/train-$rows.tsv" --quiet >/dev/null
  [ -s out/test.tsv ] ||
    ./build/bin/ctr-gen --rows 100000 --model-seed 42 --data-seed 2 --out out/test.tsv \
      --probs out/test.probs --quiet > out/test.gen.txt
}

# summary_field OUTPUT KEY: a key=value from ctr-train's summary line.
summary_field() {
  grep '^summary:' <<<"$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'
}

# record_run MODE OUTPUT: appends one run's figures to the per-mode lists
# RATE, RATIO, GAP, P50, P99, MAX (declare -A them first). A `none` run
# sets the baseline of the runs after it in the same rep, so the ratio
# pairs each run with its own rep's baseline and slow drift of the
# machine cancels.
record_run() {
  local mode=$1 out=$2 rate
  rate=$(summary_field "$out" examples/s)
  [ "$mode" != none ] || none_rate=$rate
  RATE[$mode]+="$rate "
  RATIO[$mode]+="$(awk -v a="$rate" -v b="$none_rate" 'BEGIN {print a / b}') "
  GAP[$mode]+="$(summary_field "$out" sync_gap_mean_trainers) "
  P50[$mode]+="$(summary_field "$out" sync_gap_p50_worst) "
  P99[$mode]+="$(summary_field "$out" sync_gap_p99_worst) "
  MAX[$mode]+="$(summary_field "$out" sync_gap_max_worst) "
  echo "rep $rep $mode: examples/s=$rate" >&2
}

# med "LIST": the median of a space-separated list.
med() { tr ' ' '\n' <<<"$1" | grep . | median; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# bench_ps_start LOG [FLAGS...]: a shadowsync-ps on 127.0.0.1 with its
# /metrics and FLAGS, its output in LOG; sets ps_pid, addr (gRPC) and
# ps_http. bench_ps_stop ends it.
# With BENCH_HOST=NAME (EMULATED=1) it runs on that emulated host, on its
# address's ports 7070 (gRPC) and 9090 (HTTP).
bench_ps_start() {
  local log=$1 at=127.0.0.1:0 web=127.0.0.1:0
  shift
  if [ "${EMULATED:-0}" = 1 ]; then
    at=${BENCH_IP[$BENCH_HOST]}:7070 web=${BENCH_IP[$BENCH_HOST]}:9090
  fi
  bench_on "${BENCH_HOST:-}" ./build/bin/shadowsync-ps --listen "$at" --http "$web" "$@" >"$log" 2>&1 &
  ps_pid=$!
  for _ in $(seq 100); do grep -qs "http on" "$log" && break; sleep 0.05; done
  addr=$(grep -o 'listening on [0-9.:]*' "$log" | awk '{print $3}')
  ps_http=$(grep -o 'http on [0-9.:]*' "$log" | awk '{print $3}')
}

bench_ps_stop() {
  kill "$ps_pid"
  wait "$ps_pid" 2>/dev/null || true
  ps_pid=""
}

# bench_ps_trap: at exit, stop the bench PS and any ctr-train left talking to it.
bench_ps_trap() {
  ps_pid=""
  trap '[ -z "$ps_pid" ] || kill "$ps_pid" 2>/dev/null || true
        pkill -f "ctr-train --ps 127.0.0.1" 2>/dev/null || true' EXIT
}

# bench_trainers LOG FLAGS...: TRAINERS ctr-train processes, each its share
# of USE_ROWS rows of out/train-$ROWS.tsv, with FLAGS (where they sync:
# --ps ADDR, --peers LIST, or --sync none); logs in LOG-t<rank>.log. Prints
# "NE examples/s failed_rounds": the held-out NE averaged over the
# processes, their examples/s and their failed rounds summed.
# One rep of an encoding sweep (ENCODINGS, f32 first): for each encoding a
# fresh PS (log $1), "$2 ENC" prints "ne examples_per_s ..." and "$3"
# prints "bytes count" from the PS's metrics; the rep's figures are
# appended to the caller's arrays BYTES NE NER (NE / f32's NE) and RATE.
bench_encoding_rep() {
  local log=$1 run=$2 bytes=$3 label=$4 enc ne rate bpr count base_ne=1
  for enc in "${ENCODINGS[@]}"; do
    bench_ps_start "$log"
    read -r ne rate _ < <($run "$enc")
    read -r bpr count < <($bytes)
    bench_ps_stop
    [ "$enc" != f32 ] || base_ne=$ne
    BYTES[$enc]+="$bpr "
    NE[$enc]+="$ne "
    NER[$enc]+="$(awk -v a="$ne" -v b="$base_ne" 'BEGIN {print a / b}') "
    RATE[$enc]+="$rate "
    echo "$label $enc: NE=$ne bytes=$bpr count=$count examples/s=$rate" >&2
  done
}

# The sweep's table: per encoding, printf FORMAT with the leading columns
# given, the encoding, then the medians: bytes, bytes / f32's, NE, NE
# ratio, examples/s.
bench_encoding_table() {
  local fmt=$1 enc base
  shift
  base=$(med "${BYTES[f32]}")
  for enc in "${ENCODINGS[@]}"; do
    # shellcheck disable=SC2059 # the format is the caller's
    printf "$fmt" "$@" "$enc" "$(med "${BYTES[$enc]}")" \
      "$(awk -v a="$(med "${BYTES[$enc]}")" -v b="$base" 'BEGIN {print a / b}')" \
      "$(med "${NE[$enc]}")" "$(med "${NER[$enc]}")" "$(med "${RATE[$enc]}")"
  done
}

bench_trainers() {
  local log=$1 r pids=()
  shift
  for r in $(seq 0 $((TRAINERS - 1))); do
    timeout 600 ./build/bin/ctr-train --rank "$r" --world "$TRAINERS" "$@" \
      --train "out/train-$ROWS.tsv" --max-rows "$USE_ROWS" --test out/test.tsv \
      --max-test-rows 20000 --progress 0 --trainer-name "t$r" >"$log-t$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for r in $(seq 0 $((TRAINERS - 1))); do
    o=$(cat "$log-t$r.log")
    echo "$(summary_field "$o" test_ne_train_ctr) $(summary_field "$o" examples/s)" \
      "$(summary_field "$o" failed_rounds_sum)"
  done | awk '{ne += $1; rate += $2; failed += $3} END {printf "%.5f %.0f %d\n", ne / NR, rate, failed}'
}

# bench_write_map FILE EPOCH PS [FROM]: a shard map, written whole (a PS
# never reads half of one).
bench_write_map() {
  { echo "epoch $2"; echo "ps $3"; [ -z "${4:-}" ] || echo "from $4"; } >"$1.tmp"
  mv "$1.tmp" "$1"
}

# bench_dip LOG A B: a ctr-train's examples/s between its progress lines
# (one a chunk of the stream), from its log: the slowest interval that
# overlaps [A, B) seconds over the median interval that ends before A.
bench_dip() { # log a b
  local per m
  per=$(grep -o 't=[0-9.]*s examples=[0-9]*' "$1" | tr -d 'tsexampl=' | awk '
    NR > 1 && $1 > t {print t, $1, ($2 - e) / ($1 - t)} {t = $1; e = $2}')
  m=$(awk -v a="$2" '$2 <= a {print $3}' <<<"$per" | median)
  awk -v a="$2" -v b="$3" -v m="${m:-0}" '$2 > a && $1 < b && (min == "" || $3 < min) {min = $3}
    END {printf "%.3f", (m > 0 && min != "") ? min / m : 0}' <<<"$per"
}


# Emulated hosts (EMULATED=1, as root): bench_hosts NAME... makes one
# network namespace per name with one veth link to a switch, both
# directions shaped to RATE (and DELAY) by bench/emu-lib.sh, and addresses
# 198.18.3.1... in order (BENCH_IP[NAME]); a fresh token for the run; all
# removed at exit. bench_on NAME CMD... runs CMD on that host (here, when
# not emulated), and bench_metric_sum scrapes from the first host.
bench_hosts() {
  [ "${EMULATED:-0}" = 1 ] || return 0
  [ "$(id -u)" = 0 ] || { echo "$0: --emulated 1 needs root (network namespaces)" >&2; exit 2; }
  # shellcheck disable=SC2034 # emu-lib.sh's settings
  EMU=$(basename "$0" .sh) QUIET=1 LOSS=0 BIN=$PWD/build/bin
  # shellcheck source=bench/emu-lib.sh
  source bench/emu-lib.sh
  emu_init
  declare -gA BENCH_IP
  local i=0 name
  for name in "$@"; do
    i=$((i + 1))
    add_host "$ID-$name" "198.18.3.$i"
    BENCH_IP[$name]=198.18.3.$i
  done
  BENCH_SCRAPER=$ID-$1
}

bench_on() { # NAME CMD...
  local host=$1 on=()
  shift
  [ "${EMULATED:-0}" = 0 ] || on=(ip netns exec "$ID-$host")
  # In a subshell (started with &, or a pipeline's part) the command takes
  # its place, so that $! is the process itself, as kill expects.
  if [ "$BASHPID" != $$ ]; then exec "${on[@]}" "$@"; fi
  "${on[@]}" "$@"
}
