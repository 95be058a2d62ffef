# Shared by scripts/install.sh and scripts/uninstall.sh (sourced, not run): the options both take
# (--root DIR, --dry-run, --help) and the runners that make --dry-run and --root honest.
# The sourcing script sets PROG and defines usage() first.

ROOT="" DRY=0 SHIFT=1

# common_option ARGS...: handle "$1" if it is a shared option; SHIFT = how many arguments it used.
common_option() {
  case "$1" in
    --root) ROOT=${2:?--root needs a DIR}; SHIFT=2 ;;
    --dry-run) DRY=1; SHIFT=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$PROG: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
}

# options_done: absolute --root, and root privileges unless --dry-run or --root.
options_done() {
  if [ -n "$ROOT" ]; then ROOT=$(realpath -m "$ROOT"); fi
  if [ -z "$ROOT" ] && [ "$DRY" = 0 ] && [ "$(id -u)" != 0 ]; then
    echo "$PROG: run as root (sudo), or use --dry-run / --root DIR" >&2; exit 1
  fi
}

say() { echo "$PROG: $*" >&2; }
# run CMD...: print it, then run it unless --dry-run
run() { echo "+ $*"; [ "$DRY" = 1 ] || "$@"; }
# sys CMD...: an action on the real system (needs root): under --root it is printed, not run
sys() { if [ -n "$ROOT" ]; then echo "+ $*   # skipped: --root"; else run "$@"; fi; }
