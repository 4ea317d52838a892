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

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from titan_cfg import forms, upstream

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
    attention_bias: bool = False

    @property
    def parameters(self) -> int:
        """Parameters of the model as its checkpoint stores them (tied embeddings once), counted from the shape
        without building it: the embedding, each decoder layer (:meth:`layer_parameters`), the final norm and an
        untied lm_head. The modules are transformers' ``Qwen3ForCausalLM`` / ``Qwen3MoeForCausalLM``: Qwen3-4B's
        config gives 4,022,468,096 (tests/unit/titan_cfg/test_model_spec.py holds it to transformers' own count)."""
        embedding = self.vocab_size * self.hidden_size
        layers = sum(self.layer_parameters(i) for i in range(self.num_hidden_layers))
        return embedding + layers + self.hidden_size + (0 if self.tie_word_embeddings else embedding)

    def attention_parameters(self) -> int:
        """One layer's attention: q, k, v and o projections (biases when ``attention_bias``), q and k RMSNorms over
        ``head_dim``, and the layer's two RMSNorms over ``hidden_size``."""
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        projections = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        biases = (q + 2 * kv + self.hidden_size) if self.attention_bias else 0
        return projections + biases + 2 * self.head_dim + 2 * self.hidden_size

    def layer_parameters(self, index: int) -> int:
        """Decoder layer ``index``'s parameters: attention and a gated MLP (gate, up, down: 3 x hidden x intermediate)."""
        return self.attention_parameters() + 3 * self.hidden_size * self.intermediate_size


class Qwen3MoeShape(Qwen3Shape):
    """A Qwen3 MoE ``config.json`` (transformers' ``Qwen3MoeConfig``): the dense fields plus the
    routed experts. ``moe_intermediate_size`` is each expert's FFN width; ``intermediate_size``
    is only used by dense layers, which torchtitan's Qwen3 MoE does not build (checked below).
    transformers 5.x writes ``num_local_experts`` where released checkpoints say ``num_experts``.
    """

    model_type: Literal["qwen3_moe"]
    num_experts: int = Field(gt=0, validation_alias=AliasChoices("num_experts", "num_local_experts"))
    num_experts_per_tok: int = Field(gt=0)
    moe_intermediate_size: int = Field(gt=0)
    norm_topk_prob: bool
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = []

    def layer_parameters(self, index: int) -> int:
        """Decoder layer ``index``'s parameters: attention, then routed experts (the router, hidden x experts, and
        each expert's gated MLP of ``moe_intermediate_size``) where transformers makes the layer sparse, else the
        dense MLP."""
        sparse = index not in self.mlp_only_layers and (index + 1) % self.decoder_sparse_step == 0
        if not sparse:
            return super().layer_parameters(index)
        experts = self.num_experts * 3 * self.hidden_size * self.moe_intermediate_size
        return self.attention_parameters() + self.hidden_size * self.num_experts + experts


#: config.json model_type -> the shape class that reads it.
SHAPES: dict[str, type[Qwen3Shape]] = {"qwen3": Qwen3Shape, "qwen3_moe": Qwen3MoeShape}


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
        raise ConfigError(f"weights: {path} not found; fix: give the Hugging Face model folder, which holds a "
                          "config.json")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"weights: {path} is not valid JSON ({err}); fix: restore the model's own config.json") from err


def qwen3_shape(weights_dir: Path, model_type: str | None = None) -> Qwen3Shape:
    """Read and check the Qwen3 shape of a weights folder: dense (``model_type`` "qwen3")
    or MoE ("qwen3_moe", a :class:`Qwen3MoeShape`); ``None`` accepts either.

    Raises:
        ConfigError: the config.json is missing or not JSON (:func:`read_config`), or as :func:`config_shape`.
    """
    return config_shape(read_config(weights_dir), model_type)


def config_shape(config: dict, model_type: str | None = None) -> Qwen3Shape:
    """Check the Qwen3 shape of a config.json's contents (as :func:`qwen3_shape`, for a config in hand).

    Raises:
        ConfigError: another model_type than asked (names the value found), a
            field missing, GQA heads that do not divide, an eps torchtitan
            cannot build, or (MoE) routing torchtitan's Qwen3 MoE does not build.
    """
    nested = (config.get("rope_parameters") or {}).get("rope_theta")
    if nested is not None and config.get("rope_theta") is not None and nested != config["rope_theta"]:
        raise ConfigError(f"weights: config.json says rope_theta {config['rope_theta']} and "
                          f"rope_parameters.rope_theta {nested}; they must agree (transformers 5.x reads the "
                          "latter); fix: remove one or make them equal")
    config = {**config, "rope_theta": rope_theta_of(config)}
    wanted = [model_type] if model_type else list(SHAPES)
    if config.get("model_type") not in wanted:
        raise ConfigError(
            f"weights: config.json model_type is {config.get('model_type')!r}; this scenario needs "
            f"model_type {' or '.join(map(repr, wanted))} (qwen3: dense Qwen3, qwen3_moe: Qwen3 MoE); fix: pass a "
            "folder of that model type, or the scenario of this one (native and hf_backend: qwen3, moe: qwen3_moe)"
        )
    try:
        shape = SHAPES[config["model_type"]].model_validate(config)
    except ValidationError as err:
        fields = ", ".join(".".join(map(str, e["loc"])) for e in err.errors())
        raise ConfigError(f"weights: config.json is missing or has invalid fields: {fields}; fix: give the model's "
                          "own config.json (transformers' Qwen3Config / Qwen3MoeConfig fields)") from err
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise ConfigError(
            f"weights: num_attention_heads {shape.num_attention_heads} is not a multiple of num_key_value_heads "
            f"{shape.num_key_value_heads} (each key/value head serves a whole group of query heads); fix: give the "
            "model's own config.json"
        )
    if shape.rms_norm_eps != TORCHTITAN_QWEN3_EPS:
        raise ConfigError(
            f"weights: rms_norm_eps {shape.rms_norm_eps} differs from the {TORCHTITAN_QWEN3_EPS} "
            "torchtitan's Qwen3 builds; the trained model would not be the checkpoint's architecture; fix: a Qwen3 "
            f"checkpoint with rms_norm_eps {TORCHTITAN_QWEN3_EPS}"
        )
    if isinstance(shape, Qwen3MoeShape):
        _check_moe_routing(shape)
    return shape


def _check_moe_routing(shape: Qwen3MoeShape) -> None:
    """torchtitan 0.3.0's Qwen3 MoE makes every layer an MoE layer with softmax routing and
    top-k renormalisation (``route_norm=True``); refuse checkpoints that route otherwise."""
    if shape.decoder_sparse_step != 1 or shape.mlp_only_layers:
        raise ConfigError(
            f"weights: config.json has decoder_sparse_step {shape.decoder_sparse_step} and mlp_only_layers "
            f"{shape.mlp_only_layers}; torchtitan's Qwen3 MoE builds every layer as MoE; fix: a checkpoint with "
            "decoder_sparse_step 1 and mlp_only_layers []"
        )
    if not shape.norm_topk_prob:
        raise ConfigError("weights: config.json norm_topk_prob is false; torchtitan's Qwen3 MoE "
                          "renormalises the top-k weights (route_norm=True), as Qwen3-30B-A3B does; fix: a checkpoint "
                          "trained with norm_topk_prob true")
    if shape.num_experts_per_tok > shape.num_experts:
        raise ConfigError(f"weights: num_experts_per_tok {shape.num_experts_per_tok} exceeds "
                          f"num_experts {shape.num_experts}; fix: give the model's own config.json")


def torchtitan_model_spec(shape: Qwen3Shape, *, flavor: str, max_seq_len: int, load_balance_coeff: float | None = None):
    """torchtitan ``ModelSpec`` for ``shape`` (dense or MoE), with torchtitan's own kernels
    (flex attention, CosSinRoPE; :mod:`titan_cfg.kernels` swaps them).

    Built with torchtitan 0.3.0's own Qwen3 builders (``_build_qwen3_layers`` /
    ``_build_qwen3_moe_layers``, private but the only place that encodes its init
    and layer layout: titan_cfg.upstream), and the
    spec's callables (parallelize, state-dict adapter) taken from
    ``model_registry``, so training, init and HF conversion are upstream's.
    ``max_seq_len`` sets the RoPE cache length; the trainer resizes it to
    ``training.seq_len``. ``load_balance_coeff``: the MoE's expert-bias load balancing (:func:`_layers`; None: off).
    """
    import dataclasses

    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3 import model_registry
    from torchtitan.models.qwen3.model import Qwen3Model

    tied = shape.tie_word_embeddings
    embedding_init, embedding_skip_init, linear_init = upstream.qwen3_inits()
    model = Qwen3Model.Config(
        vocab_size=shape.vocab_size,
        dim=shape.hidden_size,
        norm=upstream.qwen3_norm(shape.hidden_size),
        enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=shape.vocab_size,
            embedding_dim=shape.hidden_size,
            # Tied: the embedding is the lm_head matrix, initialised once as the head.
            param_init=embedding_skip_init if tied else embedding_init,
        ),
        lm_head=Linear.Config(in_features=shape.hidden_size, out_features=shape.vocab_size, param_init=linear_init),
        layers=_layers(shape, rope=CosSinRoPE.Config(dim=shape.head_dim, **forms.rope_length(max_seq_len),
                                                     theta=shape.rope_theta), load_balance_coeff=load_balance_coeff),
    )
    registered = model_registry("debugmodel_moe" if isinstance(shape, Qwen3MoeShape) else "debugmodel")
    return dataclasses.replace(registered, flavor=flavor, model=model)


def _layers(shape: Qwen3Shape, rope, load_balance_coeff: float | None = None) -> list:
    """torchtitan's per-layer configs: dense, or MoE with the expert-bias load balancing ``load_balance_coeff``.

    torchtitan's MoE defaults to auxiliary-loss-free balancing (``load_balance_coeff=1e-3``): a
    per-expert bias, updated every step, that shifts which experts are chosen. transformers'
    ``Qwen3MoeForCausalLM`` has no such bias, so a trained bias makes the export route
    differently from the trained model; Qwen3 itself was trained with an auxiliary loss instead. So it is off
    (None) unless the run asks for it (the walkthrough mode keeps upstream's default:
    titan_cfg.scenarios.Scenario.walkthrough).
    """
    common = dict(n_layers=shape.num_hidden_layers, dim=shape.hidden_size, n_heads=shape.num_attention_heads,
                  n_kv_heads=shape.num_key_value_heads, head_dim=shape.head_dim, attn_backend="flex", rope=rope)
    if not isinstance(shape, Qwen3MoeShape):
        return upstream.qwen3_layers(hidden_dim=shape.intermediate_size, **common)
    layers = upstream.qwen3_moe_layers(moe_hidden_dim=shape.moe_intermediate_size, num_experts=shape.num_experts,
                                     top_k=shape.num_experts_per_tok, moe_comm_backend="standard", **common)
    for layer in layers:
        layer.moe.load_balance_coeff = load_balance_coeff
    return layers
