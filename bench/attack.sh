#!/usr/bin/env bash
# The resource attacks against a release build of shadowsync-ps
# (bench/attack.py says what each does): one line per attack with its
# figure before and during it, and the bound it must stay within.
#   bash bench/attack.sh                  # door lookups readers readers_niced budget rows http
#                                         # bulk_drip bulk_slots bulk_emfile bulk_stall bulk_hoard
#   bash bench/attack.sh readers http     # some of them
# Run it on a quiet machine: the readers attack times latencies.
source "$(dirname "$0")/common.sh"
exec /usr/bin/python3 bench/attack.py build/bin/shadowsync-ps rpc "$@"
