# The emulated cluster's building blocks, sourced by emu-cluster.sh and
# fault-soak.sh (root): a "switch" namespace with a bridge, hosts as
# namespaces with one shaped veth link to it, link latency (netem, or
# shadowsync-emu-delay where the kernel has no netem), packet loss and
# partitions with nftables, and a cleanup that removes every process,
# namespace and file they made, also on SIGINT/SIGTERM. The sourcing
# script sets EMU (its name, for messages), QUIET, RATE, DELAY and LOSS
# (and BIN, the build's bin folder), then calls emu_init; it appends the
# processes it starts to PIDS.

die() { echo "$EMU: $*" >&2; exit 1; }
say() { [ "${QUIET:-0}" = 1 ] || echo "$EMU: $*" >&2; }

tc_rate_bits() { # 10gbit -> 10000000000
  local r=${1,,}
  case $r in
  *gbit) echo $((${r%gbit} * 1000000000)) ;;
  *mbit) echo $((${r%mbit} * 1000000)) ;;
  *kbit) echo $((${r%kbit} * 1000)) ;;
  *bit) echo "${r%bit}" ;;
  *) die "--rate: use NNgbit, NNmbit or NNkbit, not $1" ;;
  esac
}

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # How close the latency lines kept to the delay asked for.
  for f in "$TMP"/delay-*.log; do
    [ -f "$f" ] || continue
    local line
    line=$(grep -o 'packets=.*' "$f" | tail -1)
    local ns=${f##*/delay-}
    [ -z "$line" ] || say "latency line ${ns%.log}: $line"
  done
  for ns in "${NSES[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null # its veth ends (and their peers) go with it
  done
  rm -rf "$TMP"
}

delay_us() { # 50us, 2ms, 0 -> microseconds
  local d=${1,,}
  case $d in
  0) echo 0 ;;
  *us) echo "${d%us}" ;;
  *ms) awk -v v="${d%ms}" 'BEGIN { printf "%d", v * 1000 }' ;;
  *s) awk -v v="${d%s}" 'BEGIN { printf "%d", v * 1000000 }' ;;
  *) die "--delay: use NNus, NNms or 0, not $1" ;;
  esac
}

# Creates the switch and the run's token ($TMP/token). Shaping: netem
# (rate + delay + loss) where the kernel has it, else tbf (rate),
# shadowsync-emu-delay (latency: each host's incoming packets held in an
# NFQUEUE queue for the two links they crossed, 2 x DELAY) and nftables
# (loss).
emu_init() {
  # Unique names, short enough for interfaces (15 characters).
  ID=se$$
  SW=$ID-sw
  TMP=$(mktemp -d "/tmp/ss-emu-$ID-XXXXXX") # the run's processes name it: tests find them
  NSES=()
  PIDS=()
  NLINK=0
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  NETEM=0
  ip netns add "$SW"
  NSES+=("$SW")
  ip -n "$SW" link set lo up
  if ip netns exec "$SW" tc qdisc add dev lo root netem delay 1us 2>/dev/null; then
    NETEM=1
    ip netns exec "$SW" tc qdisc del dev lo root
  fi
  DELAY_US=$(delay_us "$DELAY") || exit 1
  if [ $NETEM = 0 ]; then
    if [ "$DELAY_US" != 0 ]; then
      [ -x "${BIN:-}/shadowsync-emu-delay" ] ||
        die "--delay $DELAY: no sch_netem in this kernel, and no ${BIN:-build/bin}/shadowsync-emu-delay to emulate it (apt-get install libnetfilter-queue-dev, then build)"
      command -v iptables >/dev/null || die "--delay $DELAY needs iptables (NFQUEUE) where there is no sch_netem"
    fi
    if [ "$LOSS" != 0 ]; then
      command -v nft >/dev/null || die "--loss needs sch_netem or nftables (apt-get install nftables)"
    fi
  fi
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  # The hosts' addresses are not loopback, so the PS needs a token: a fresh
  # one per run, which every client reads from the same variable.
  # The PS fleet's own, for rows moving between shards, read by every PS.
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/peer-token"
  chmod 600 "$TMP/token" "$TMP/peer-token"
  export SHADOWSYNC_AUTH_TOKEN_FILE=$TMP/token SHADOWSYNC_PEER_TOKEN_FILE=$TMP/peer-token
  unset SHADOWSYNC_INSECURE_LOOPBACK # a PS refuses it beside a token
  export SHADOWSYNC_LOG_LEVEL=${SHADOWSYNC_LOG_LEVEL:-warn}
}

shape() { # NS DEV   (HOST_RATE, when set, instead of RATE: one host's own link)
  local rate=${HOST_RATE:-$RATE}
  if [ $NETEM = 1 ]; then
    ip netns exec "$1" tc qdisc add dev "$2" root netem delay "$DELAY" rate "$rate" loss "$LOSS%" limit 100000
  else
    # burst: 1 ms at the rate (at least 64 KiB), so one packet never waits a whole period
    local bps
    bps=$(tc_rate_bits "$rate")
    local burst=$((bps / 8 / 1000))
    [ $burst -ge 65536 ] || burst=65536
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 20ms
  fi
}

# Drops PERCENT of the packets in each direction of host NS's link (eth0),
# with nftables: a random number per packet, so the drops are independent.
emu_loss() { # NS PERCENT
  local per10k
  per10k=$(awk -v p="$2" 'BEGIN { if (p !~ /^[0-9.]+$/ || p > 100) exit 1; printf "%d", p * 100 }') ||
    die "--loss must be a percentage 0..100, not $2"
  [ "$per10k" -gt 0 ] || return 0
  ip netns exec "$1" nft -f - <<NFT
table inet emu_loss {
  chain in { type filter hook input priority 0; iifname "eth0" numgen random mod 10000 < $per10k drop; }
  chain out { type filter hook output priority 0; oifname "eth0" numgen random mod 10000 < $per10k drop; }
}
NFT
}

# A partition: every packet on host NS's link is dropped (silently, as a
# failed switch port would) until emu_heal.
emu_cut() { # NS
  ip netns exec "$1" nft -f - <<NFT
table inet emu_cut {
  chain in { type filter hook input priority -10; iifname "eth0" drop; }
  chain out { type filter hook output priority -10; oifname "eth0" drop; }
}
NFT
}
emu_heal() { ip netns exec "$1" nft delete table inet emu_cut; }

add_host() { # NS ADDRESS
  local ns=$1 addr=$2 port=p$NLINK
  NLINK=$((NLINK + 1))
  ip netns add "$ns"
  NSES+=("$ns")
  ip -n "$ns" link set lo up
  # TCP buffers of a host tuned for long links: a new namespace's 6 MiB
  # at most would cap one connection at 6 MiB per round trip (1.2 Gbit/s
  # at 40 ms), which is the buffer's limit, not the link's.
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 67108864" \
    net.ipv4.tcp_wmem="4096 16384 67108864"
  ip -n "$ns" link add eth0 type veth peer name "$port" netns "$SW"
  ip -n "$ns" addr add "$addr/16" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$SW" link set "$port" master br0
  ip -n "$SW" link set "$port" up
  shape "$ns" eth0    # host -> switch
  shape "$SW" "$port" # switch -> host
  [ $NETEM = 1 ] || [ "$LOSS" = 0 ] || emu_loss "$ns" "$LOSS"
  [ $NETEM = 1 ] || [ "$DELAY_US" = 0 ] || emu_delay "$ns"
}

# Link latency without netem: the host's incoming packets wait 2 x DELAY
# in shadowsync-emu-delay (a packet between two hosts crosses two links,
# as two netem qdiscs would delay it), bound before the rule that queues
# them so that none is dropped for want of a reader.
emu_delay() { # NS
  local log=$TMP/delay-$1.log
  ip netns exec "$1" "$BIN/shadowsync-emu-delay" --delay-us $((2 * DELAY_US)) 2>"$log" &
  PIDS+=($!)
  wait_line "$log" ready $!
  ip netns exec "$1" iptables -t raw -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0
}

wait_line() { # FILE PATTERN PID
  for _ in $(seq 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || { cat "$1" >&2; die "a process exited at start ($1)"; }
    sleep 0.1
  done
  cat "$1" >&2
  die "no \"$2\" in $1 after 30 s"
}
