#!/usr/bin/env bash
# Install a real SGLang server for the CPU, for the `sglang` tests in
# tests/integration/ (RECIPES.md, "A real SGLang server on the CPU";
# docs/sglang.md).
#
# - SGLang lives in its OWN venv (default $HOME/.cache/agentrt/sglang-venv,
#   override with AGENTRT_SGLANG_VENV): PyPI `sglang` with its own pins
#   (a CUDA build of torch, `sglang-kernel`), about 11 GB and 5 minutes the
#   first time, so it is cached.
# - The model is the SmolLM2-135M-Instruct Hugging Face folder that
#   .ci/vllm-setup.sh converts ($HOME/.cache/agentrt/smol-hf, override with
#   AGENTRT_SGLANG_MODEL_DIR); run that script first (.ci/run does).
# - A stub `libcuda.so.1` is built with gcc into $CACHE/sglang-cuda-stub.
#   Why it is needed: sgl_kernel's `common_ops` library is linked against
#   libcuda.so.1 (for one symbol, cuPointerGetAttribute), so without an
#   NVIDIA driver it cannot even be imported, and SGLang imports it at start.
#   Why it is safe: every function of the stub answers
#   CUDA_ERROR_NO_DEVICE (100), so anything that asks finds no GPU, and
#   with SGLANG_USE_CPU_ENGINE=1 on an AVX2 CPU the engine runs torch-native
#   attention and layers on the CPU: no CUDA kernel is ever launched.  It
#   only satisfies the dynamic linker.  On a GPU machine drop it (and the
#   variable): the real driver's libcuda.so.1 is used.
# - Idempotent and cached: a stamp records what was installed; a second run
#   with the same recipe prints "up to date" and exits within a second.
#   AGENTRT_SGLANG_FORCE=1 redoes every step.
#
# Start the server as tests/integration/conftest.py does (`sglang_server`):
#   SGLANG_USE_CPU_ENGINE=1 LD_LIBRARY_PATH=$CACHE/sglang-cuda-stub HF_HUB_OFFLINE=1 \
#   $VENV/bin/python -m sglang.launch_server --model-path $MODEL_DIR --served-model-name smol \
#     --device cpu --attention-backend torch_native --disable-overlap-schedule \
#     --max-total-tokens 8192 --host 127.0.0.1 --port 30000
# Every phase is timed; the figures are printed and written to
# $AGENTRT_CACHE/sglang-setup-timings.txt.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${AGENTRT_CACHE:-$HOME/.cache/agentrt}"
VENV="${AGENTRT_SGLANG_VENV:-$CACHE/sglang-venv}"
MODEL_DIR="${AGENTRT_SGLANG_MODEL_DIR:-${AGENTRT_VLLM_MODEL_DIR:-$CACHE/smol-hf}}"
STUB_DIR="${AGENTRT_SGLANG_STUB_DIR:-$CACHE/sglang-cuda-stub}"
PYTHON="${AGENTRT_SGLANG_PYTHON:-python3}"
SGLANG_VERSION="0.5.23"
STAMP="$VENV/.agentrt-sglang-setup"
TIMINGS="$CACHE/sglang-setup-timings.txt"

SETUP_NAME="sglang-setup"
SETUP_FORCE="AGENTRT_SGLANG_FORCE"
# shellcheck source=.ci/setup-common.sh
source "$HERE/setup-common.sh"

[[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/model.safetensors" ]] \
  || die "no SmolLM2 Hugging Face folder at $MODEL_DIR: run .ci/vllm-setup.sh first (it converts it)"

# The recipe key: anything that changes what gets installed invalidates the stamp.
RECIPE="sglang=$SGLANG_VERSION $(setup_sums) stub=$STUB_DIR"

if [[ "${AGENTRT_SGLANG_FORCE:-0}" != "1" && -f "$STAMP" && -x "$VENV/bin/python" \
      && -f "$STUB_DIR/libcuda.so.1" ]] && [[ "$(cat "$STAMP")" == "$RECIPE" ]]; then
  log "up to date: venv=$VENV stub=$STUB_DIR model=$MODEL_DIR"
  exit 0
fi

setup_begin

command -v "$PYTHON" >/dev/null || die "python interpreter '$PYTHON' not found (set AGENTRT_SGLANG_PYTHON)"
command -v gcc >/dev/null || die "gcc not found: it builds the libcuda.so.1 stub (apt-get install gcc)"

setup_venv

phase install-sglang
pip_ install -q "sglang==$SGLANG_VERSION"

phase build-cuda-stub
# See the header: answers "no device" to everything; no CUDA kernel runs.
mkdir -p "$STUB_DIR"
cat > "$STUB_DIR/cuda_stub.c" <<'C'
/* A stand-in for the NVIDIA driver's libcuda.so.1 on a machine without one
   (built by agentrt's .ci/sglang-setup.sh).  sgl_kernel links libcuda.so.1
   for cuPointerGetAttribute; every entry point here answers
   CUDA_ERROR_NO_DEVICE (100), so nothing can use a GPU through it. */
#define CUDA_ERROR_NO_DEVICE 100
int cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }
int cuDriverGetVersion(int *version) { if (version) *version = 0; return CUDA_ERROR_NO_DEVICE; }
int cuDeviceGetCount(int *count) { if (count) *count = 0; return CUDA_ERROR_NO_DEVICE; }
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
  (void)data; (void)attribute; (void)ptr; return CUDA_ERROR_NO_DEVICE;
}
C
gcc -shared -fPIC -O2 -Wall -Wextra -Wl,-soname,libcuda.so.1 \
  -o "$STUB_DIR/libcuda.so.1.part" "$STUB_DIR/cuda_stub.c"
mv "$STUB_DIR/libcuda.so.1.part" "$STUB_DIR/libcuda.so.1"

phase check-import
SGLANG_USE_CPU_ENGINE=1 LD_LIBRARY_PATH="$STUB_DIR" "$VENV/bin/python" - <<'PY'
import importlib.metadata as m
import torch
import sgl_kernel  # noqa: F401  (fails without the stub: "Could not load any common_ops library")
import sglang.launch_server  # noqa: F401
assert not torch.cuda.is_available(), "the stub must answer 'no device'"
print(f"[sglang-setup] sglang {m.version('sglang')} torch {torch.__version__} sgl_kernel loaded, no CUDA device: ok")
PY

setup_done "$STAMP" "$RECIPE" "venv=$VENV stub=$STUB_DIR model=$MODEL_DIR"
