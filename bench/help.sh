# Sourced first by every bench script (common.sh sources it), for what
# every script shares at its door:
# - --help or -h prints the script's opening comment (what it measures,
#   how to run it) and the flags it takes, and exits before anything is
#   built or run;
# - bench_flags "$@": the one option parser. A script's settings are the
#   environment variables it reads as ${NAME:-default}; each is also the
#   flag --name (dashes for underscores, --name VALUE or --name=VALUE),
#   and a flag given wins over the environment. Other arguments are kept,
#   in order, in BENCH_ARGS (set -- "${BENCH_ARGS[@]}" to read them); an
#   unknown flag is refused with exit 2 and the list of flags;
# - bench_metric_sum URL REGEX: the one metrics scraper: the sum of the
#   Prometheus series at URL (host:port of a /metrics endpoint) whose line
#   matches the awk regex.
# - bench_named_flags "ps:PS quiet:QUIET!" "$@": the parser of a script
#   whose flags are named apart from its variables (the emulated-cluster
#   scripts, with their own usage text): each word maps --flag to VAR
#   (--flag VALUE or --flag=VALUE), a trailing ! makes it a switch that
#   sets VAR=1; --help calls the script's usage; "--" ends the flags and
#   what follows is kept in BENCH_ARGS.

# The settings of the script: its ${NAME:-...} reads, less the project's
# own SHADOWSYNC_* names and the build switch (common.sh's).
bench_flag_names() {
  grep -o '\${[A-Z][A-Z0-9_]*:-' "$0" | sed 's/^\${//; s/:-$//' | sort -u |
    grep -v '^SHADOWSYNC_\|^SS_BENCH_REBUILD$\|^SS_BIN$' || true
}

# A setting's flag: its name less a script's SS_<SCRIPT>_ prefix, in lower
# case with dashes (SS_SCALING_MODES: --modes; USE_ROWS: --use-rows).
bench_flag_of() {
  sed 's/^SS_[A-Z]*_\([A-Z]\)/\1/' <<<"$1" | tr 'A-Z_' 'a-z-'
}

bench_flag_list() {
  local name list=""
  for name in $(bench_flag_names); do list+="--$(bench_flag_of "$name") "; done
  echo "${list:-(none) }"
}

bench_flags() {
  local flag name value n names
  names=$(bench_flag_names)
  BENCH_ARGS=()
  while [ $# -gt 0 ]; do
    flag=$1
    case $flag in
      --*=*) value=${flag#*=}; flag=${flag%%=*} ;;
      --*)
        if [ $# -lt 2 ]; then
          echo "$(basename "$0"): $flag needs a value" >&2
          exit 2
        fi
        value=$2
        shift
        ;;
      *) BENCH_ARGS+=("$flag"); shift; continue ;;
    esac
    name=""
    for n in $names; do
      [ "--$(bench_flag_of "$n")" = "$flag" ] && name=$n
    done
    if [ -z "$name" ]; then
      echo "$(basename "$0"): unknown flag $flag; flags: $(bench_flag_list)(see --help)" >&2
      exit 2
    fi
    export "$name=$value"
    shift
  done
}

bench_named_flags() {
  local table=$1 flag value var entry
  shift
  BENCH_ARGS=()
  while [ $# -gt 0 ]; do
    flag=${1%%=*} var=""
    case $1 in
      --help | -h) usage; exit 0 ;;
      --) shift; BENCH_ARGS=("$@"); return 0 ;;
    esac
    for entry in $table; do
      [ "--${entry%%:*}" = "$flag" ] && var=${entry#*:}
    done
    if [ -z "$var" ]; then
      echo "$(basename "$0"): unknown flag $1 (try --help)" >&2
      exit 2
    fi
    if [ "${var%!}" != "$var" ]; then
      printf -v "${var%!}" 1
    elif [ "$flag" != "$1" ]; then
      printf -v "$var" '%s' "${1#*=}"
    elif [ $# -ge 2 ]; then
      printf -v "$var" '%s' "$2"
      shift
    else
      echo "$(basename "$0"): $flag needs a value" >&2
      exit 2
    fi
    shift
  done
}

bench_metric_sum() {
  ${BENCH_SCRAPER:+ip netns exec "$BENCH_SCRAPER"} curl -s "http://$1/metrics" | awk -v re="$2" '$0 ~ re {s += $NF} END {printf "%.0f\n", s}'
}

case "${1:-}" in
  --help | -h)
    if declare -F usage >/dev/null; then
      usage
      exit 0
    fi
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    if [ -n "$(bench_flag_names)" ] && grep -q '^bench_flags \|/common.sh"' "$0"; then
      echo
      echo "Flags (--name VALUE; each falls back on its environment variable):"
      for n in $(bench_flag_names); do printf '  --%-24s %s\n' "$(bench_flag_of "$n")" "$n"; done
    fi
    exit 0
    ;;
esac
