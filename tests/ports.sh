# Sourced by shell tests: reserve_port sets RESERVED_PORT to a free port
# below the kernel's ephemeral range, locked for as long as this shell
# runs, for programs that cannot listen on port 0 and report the port
# (Prometheus, torch.distributed's master). tests/ports.h says why: a
# port the kernel gives out can be taken by anyone, and the lock keeps the
# other tests (C ones too: the same lock files) off this one.
reserve_port() {
  local low _ lo span port fd
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  lo=$((low > 12000 ? low - 10000 : 1024))
  span=$((low - lo))
  mkdir -p -m 700 /tmp/ss-test-ports
  for _ in $(seq 1000); do
    port=$((lo + (RANDOM * 32768 + RANDOM) % span))
    exec {fd}>"/tmp/ss-test-ports/$port.lock"
    # Locked by nobody else, and nobody listens there now.
    if flock -n "$fd" && ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      RESERVED_PORT=$port
      return 0
    fi
    exec {fd}>&-
  done
  echo "reserve_port: no free port below $low in 1000 tries" >&2
  return 1
}
