# Sourced first by every bench script (common.sh sources it): --help or
# -h prints the script's opening comment, which says what it measures and
# how to run it, and exits before anything is built or run.
case "${1:-}" in
  --help | -h)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
esac
