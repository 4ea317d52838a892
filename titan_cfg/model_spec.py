"""Qwen3 model shapes read from a Hugging Face ``config.json``, and the torchtitan
model spec built from them, so the model torchtitan trains is the architecture
the weights folder describes.

torchtitan's native Qwen3 does not read ``config.json``: its flavors hard-code
shapes (the "4B" flavor has rope_theta 1e6 and 40960 context, while
Qwen3-4B-Instruct-2507 uses 5e6 and 262144). Building the spec from the folder
removes that class of silent mismatch; what torchtitan cannot express (another
RMSNorm eps) is an error here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: torchtitan 0.3.0's Qwen3 builders use this RMSNorm eps (models/qwen3/__init__.py `_EPS`).
TORCHTITAN_QWEN3_EPS = 1e-6


class ConfigError(ValueError):
    """A weights folder's config.json cannot describe a model torchtitan will build."""


class Qwen3Shape(BaseModel):
    """The fields of a dense Qwen3 ``config.json`` that fix the architecture.

    Names are transformers' (``Qwen3Config``); every size is a count of elements.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    model_type: Literal["qwen3"]
    vocab_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    rope_theta: float = Field(gt=0)
    rms_norm_eps: float = Field(gt=0)
    tie_word_embeddings: bool
    max_position_embeddings: int = Field(gt=0)


def rope_theta_of(config: dict) -> float | None:
    """RoPE base from a config dict: transformers 5.x nests it in ``rope_parameters``, 4.x has ``rope_theta``."""
    params = config.get("rope_parameters") or {}
    return params.get("rope_theta", config.get("rope_theta"))


def read_config(weights_dir: Path) -> dict:
    """Load ``<weights_dir>/config.json``.

    Raises:
        ConfigError: the file is missing or not JSON (names the path).
    """
    path = Path(weights_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"weights_dir: {path} not found; a Hugging Face model folder needs a config.json")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"weights_dir: {path} is not valid JSON ({err})") from err


def qwen3_shape(weights_dir: Path) -> Qwen3Shape:
    """Read and check the dense Qwen3 shape of a weights folder.

    Raises:
        ConfigError: not a Qwen3 config (names the field and the value found), a
            field missing, GQA heads that do not divide, or an eps torchtitan
            cannot build.
    """
    config = read_config(weights_dir)
    config = {**config, "rope_theta": rope_theta_of(config)}
    if config.get("model_type") != "qwen3":
        raise ConfigError(
            f"weights_dir: config.json model_type is {config.get('model_type')!r}; "
            "the native scenario needs a dense Qwen3 checkpoint (model_type 'qwen3')"
        )
    try:
        shape = Qwen3Shape.model_validate(config)
    except ValidationError as err:
        fields = ", ".join(".".join(map(str, e["loc"])) for e in err.errors())
        raise ConfigError(f"weights_dir: config.json is missing or has invalid fields: {fields}") from err
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise ConfigError(
            f"weights_dir: num_attention_heads {shape.num_attention_heads} is not a multiple "
            f"of num_key_value_heads {shape.num_key_value_heads}"
        )
    if shape.rms_norm_eps != TORCHTITAN_QWEN3_EPS:
        raise ConfigError(
            f"weights_dir: rms_norm_eps {shape.rms_norm_eps} differs from the {TORCHTITAN_QWEN3_EPS} "
            "torchtitan's Qwen3 builds; the trained model would not be the checkpoint's architecture"
        )
    return shape


def torchtitan_model_spec(shape: Qwen3Shape, *, flavor: str, max_seq_len: int):
    """torchtitan ``ModelSpec`` for ``shape``, with flex attention (swap it with
    :func:`titan_cfg.attention.use_attention`).

    Built with torchtitan 0.3.0's own Qwen3 builders (``_build_qwen3_layers``,
    private but the only place that encodes its init and layer layout), and the
    spec's callables (parallelize, state-dict adapter) taken from
    ``model_registry``, so training, init and HF conversion are upstream's.
    ``max_seq_len`` sets the RoPE cache length; the trainer resizes it to
    ``training.seq_len``.
    """
    import dataclasses

    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _LINEAR_INIT,
        _build_qwen3_layers,
        _qwen3_norm,
        model_registry,
    )
    from torchtitan.models.qwen3.model import Qwen3Model

    tied = shape.tie_word_embeddings
    model = Qwen3Model.Config(
        vocab_size=shape.vocab_size,
        dim=shape.hidden_size,
        norm=_qwen3_norm(shape.hidden_size),
        enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=shape.vocab_size,
            embedding_dim=shape.hidden_size,
            # Tied: the embedding is the lm_head matrix, initialised once as the head.
            param_init=_EMBEDDING_SKIP_INIT if tied else _EMBEDDING_INIT,
        ),
        lm_head=Linear.Config(in_features=shape.hidden_size, out_features=shape.vocab_size, param_init=_LINEAR_INIT),
        layers=_build_qwen3_layers(
            n_layers=shape.num_hidden_layers,
            dim=shape.hidden_size,
            n_heads=shape.num_attention_heads,
            n_kv_heads=shape.num_key_value_heads,
            head_dim=shape.head_dim,
            hidden_dim=shape.intermediate_size,
            attn_backend="flex",
            rope=CosSinRoPE.Config(dim=shape.head_dim, max_seq_len=max_seq_len, theta=shape.rope_theta),
        ),
    )
    upstream = model_registry("debugmodel")
    return dataclasses.replace(upstream, flavor=flavor, model=model)
