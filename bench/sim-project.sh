#!/usr/bin/env bash
# Projections with the simulator (shadowsync-sim, calibrated by
# bench/sim-calibrate.sh) to clusters no test machine holds: N trainers
# (8 to a host, 4 cores of each host for the agent's sync work), S PS of
# 16 cores each running 16 request threads (shadowsync-ps --threads 16),
# 25 Gbit/s links with 50 us latency, 1M floats per trainer, 10 ms steps.
# Prints one `sim:` line per (N, S, mode).
#   bash bench/sim-project.sh
#   SS_PROJECT="10000:10 10000:100" SS_PROJECT_SECONDS=3 bash bench/sim-project.sh   # as BENCHMARKS.md
source "$(dirname "$0")/common.sh"
CAL=${SS_PROJECT_CALIBRATION:-bench/results/sim-calibration.txt}
POINTS=${SS_PROJECT:-1000:1 1000:10 1000:100}
MODES=${SS_PROJECT_MODES:-easgd,ma,bmuf,fg1,fg10}
SECS=${SS_PROJECT_SECONDS:-10}
DENSE=${SS_PROJECT_DENSE:-1048576}
echo "sim-project: $DENSE floats, 10 ms steps, 8 trainers/host (4 sync cores), PS 16 cores x 16 threads, 25 Gbit/s, ${SECS} s simulated, costs from $CAL" >&2
for p in $POINTS; do
  ./build/bin/shadowsync-sim --trainers "${p%%:*}" --ps "${p#*:}" --modes "$MODES" \
    --calibration "$CAL" --dense-floats "$DENSE" --per-host 8 --host-cores 4 --ps-cores 16 \
    --ps-threads 16 --link-gbit 25 --latency-us 50 --seconds "$SECS"
done
