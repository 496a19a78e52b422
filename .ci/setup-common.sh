# Shared by .ci/vllm-setup.sh and .ci/sglang-setup.sh (sourced, not run):
# their logging, the error trap that names the failed phase, the phase
# timer, and pip inside the server's own venv.
#
# The sourcing script sets, before `source`:
#   SETUP_NAME   the log tag, e.g. "vllm-setup"
#   SETUP_FORCE  the variable that redoes every phase, e.g. "AGENTRT_VLLM_FORCE"
#   VENV, MODEL_DIR, CACHE, TIMINGS, PYTHON
# and calls `setup_begin` once it is sure there is work to do, `phase NAME`
# before each step, and `setup_done STAMP RECIPE SUMMARY` at the end.

log() { printf '[%s] %s\n' "$SETUP_NAME" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$SETUP_NAME" "$*" >&2; exit 1; }

PHASE="start"
on_error() {
  local rc=$?
  printf '[%s] ERROR: phase "%s" failed (exit %s); venv=%s model=%s\n' \
    "$SETUP_NAME" "$PHASE" "$rc" "$VENV" "$MODEL_DIR" >&2
  printf '[%s] fix the cause and run it again (%s=1 redoes every phase)\n' \
    "$SETUP_NAME" "$SETUP_FORCE" >&2
  exit "$rc"
}
trap on_error ERR

# The part of a recipe key that changes when these scripts change: the
# sourcing script's own sum and this file's.
setup_sums() {
  local self_sum common_sum
  self_sum="$(sha256sum "${BASH_SOURCE[${#BASH_SOURCE[@]}-1]}" | cut -c1-16)"
  common_sum="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
  printf 'setup=%s common=%s' "$self_sum" "$common_sum"
}

setup_begin() {  # start the timings file and the clock
  mkdir -p "$CACHE"
  : > "$TIMINGS"
  T_ALL=$(date +%s.%N)
  T_PHASE=$T_ALL
}

phase() {  # close the previous phase (print its time) and open the next one
  local now; now=$(date +%s.%N)
  if [[ "$PHASE" != "start" ]]; then
    local dt; dt=$(awk -v a="$T_PHASE" -v b="$now" 'BEGIN{printf "%.1f", b-a}')
    log "phase $PHASE: ${dt}s"
    printf '%s %s\n' "$PHASE" "$dt" >> "$TIMINGS"
  fi
  PHASE="$1"
  T_PHASE=$now
  [[ "$PHASE" == "done" ]] || log "phase $PHASE ..."
}

pip_() {  # pip in the server's venv, minus the noise of file:// index entries that do not exist
  "$VENV/bin/python" -m pip --no-input "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

setup_venv() {  # the server's own venv, with a current pip
  phase venv
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
  fi
  pip_ install -q --upgrade pip
}

setup_done() {  # STAMP RECIPE SUMMARY: close the last phase, record the total and the stamp
  phase done
  local total
  total=$(awk -v a="$T_ALL" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  printf 'total %s\n' "$total" >> "$TIMINGS"
  printf '%s' "$2" > "$1"
  log "done in ${total}s: $3 (timings in $TIMINGS)"
}
