"""Scenarios: what is trained, as torchtitan base configs (one function each).

A scenario function takes the rendered :class:`~titan_cfg.job.Job` and returns
the torchtitan ``Trainer.Config`` it starts from, the way torchtitan's
``config_registry`` functions do; :mod:`titan_cfg.trainer_config` then applies
the target's and the job's edits. The names and their one-line descriptions are
importable without torch (the flow validates against them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from titan_cfg import forms
from titan_cfg.job import WALKTHROUGH_CONTEXT, WALKTHROUGH_ROPE_THETA, Job
from titan_cfg.model_spec import torchtitan_model_spec

if TYPE_CHECKING:
    from torchtitan.trainer import Trainer


def _native_qwen3(job: Job, upstream: "Callable[[], Trainer.Config]") -> "Trainer.Config":
    """``upstream()`` (a torchtitan Qwen3 config function) with the model spec built from the
    job's shape (the weights folder's config.json, read at render), and the target's SPMD
    backend for torchtitan's own models."""
    shape = job.shape
    config = upstream()
    config.model_spec = torchtitan_model_spec(
        shape, flavor=f"hf:{Path(job.weights_dir).name}", max_seq_len=shape.max_position_embeddings,
        load_balance_coeff=job.load_balance_coeff,
    )
    forms.set_loss_vocab_size(config.loss, shape.vocab_size)
    if job.spmd_backend:  # the target's choice for torchtitan's own models (cpu: partial_dtensor), as the install names it
        config.parallelism.spmd_backend = forms.spmd_backend(job.spmd_backend)
    return config


#: The walkthrough's scenario 2 spec, as it writes it: ``model_registry("4B", attn_backend="sdpa")``.
WALKTHROUGH_FLAVOR, WALKTHROUGH_ATTENTION = "4B", "sdpa"


def walkthrough_spec(job: Job):
    """``model_registry("4B", attn_backend="sdpa")``, the walkthrough's scenario 2 spec (``job.model_spec``
    "walkthrough"): the "4B" flavor's hard-coded rope_theta 1e6 and 40960 context, whatever config.json says.

    A base up to 2026-06-09 accepts ``attn_backend="sdpa"``; later ones and torchtitan 0.3.0 refuse it for language
    models ("sdpa is no longer supported for language models", models/common/config_utils.py), so there
    the flavor is built with its default backend (titan_cfg.forms.walkthrough_model_spec). Either way the attention that runs is the kernel
    registry's (titan_cfg.kernels: ``attention=causal`` in this mode), installed after this.

    Weights of another shape than the flavor's (the embedded tiny model on cpu) cannot load into it: their spec
    is built from config.json as in the default mode, with the flavor's rope_theta and context, the two settings
    the flavor fixes beyond the shape.
    """
    spec = forms.walkthrough_model_spec(WALKTHROUGH_FLAVOR, WALKTHROUGH_ATTENTION)
    model, shape = spec.model, job.shape
    if (model.dim, model.vocab_size, len(model.layers)) == (shape.hidden_size, shape.vocab_size,
                                                            shape.num_hidden_layers):
        return spec
    flavored = shape.model_copy(update={"rope_theta": WALKTHROUGH_ROPE_THETA})
    return torchtitan_model_spec(flavored, flavor=f"{WALKTHROUGH_FLAVOR}-rope:{Path(job.weights_dir).name}",
                                 max_seq_len=WALKTHROUGH_CONTEXT, load_balance_coeff=job.load_balance_coeff)


def native(job: Job) -> "Trainer.Config":
    """torchtitan's own Qwen3 (walkthrough scenario 2): ``qwen3_32b()`` with the
    checkpoint's spec swapped in.

    The walkthrough swaps ``model_registry("4B", attn_backend="sdpa")`` into ``qwen3_32b()``; by default
    (``job.model_spec`` "config") the spec is built from the weights folder's config.json instead, which
    keeps Instruct-2507's rope_theta 5e6 (the "4B" flavor hard-codes 1e6). ``model_spec`` "walkthrough"
    reproduces the walkthrough's swap (:func:`walkthrough_spec`); the rest of that mode (the scenario record's
    ``walkthrough``) is resolved with the run's parameters. The 32B-specific ``hf_assets_path`` that ``qwen3_32b()``
    carries is replaced in :func:`titan_cfg.trainer_config.build`.
    """
    from torchtitan.models.qwen3.config_registry import qwen3_32b

    config = _native_qwen3(job, qwen3_32b)
    if job.model_spec == "walkthrough":
        config.model_spec = walkthrough_spec(job)
    return config


def moe(job: Job) -> "Trainer.Config":
    """torchtitan's native Qwen3 MoE (walkthrough scenario 3): ``qwen3_30b_a3b()`` with the
    checkpoint's spec swapped in, tensor parallel 1 and no expert parallel (as upstream's
    function sets them). The walkthrough trims Qwen3-30B-A3B to 4 layers, 64 experts, top-4
    in the checkpoint's config.json; the expert-bias load balancing is the job's ``load_balance_coeff`` (off by
    default, upstream's 1e-3 under ``model_spec`` "walkthrough": ``titan_cfg.model_spec._layers``). The 30B's
    ``hf_assets_path`` is replaced in :func:`titan_cfg.trainer_config.build`.
    """
    from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b

    return _native_qwen3(job, qwen3_30b_a3b)


def hf_backend(job: Job) -> "Trainer.Config":
    """torchtitan's transformers modeling backend (walkthrough scenario 1):
    ``transformers_modeling_backend_full()`` with ``hf_model`` set to the weights
    folder, so transformers itself builds the model from its config.json.

    The folder must still be a dense Qwen3 checkpoint (its ``model_type`` is checked at render):
    the scenario's expectations and export checks are Qwen3's. The transformers backend needs
    the ``hf_backend`` compat layer (titan_cfg.compat.hf_backend).
    """
    from torchtitan.experiments.transformers_modeling_backend.config_registry import (
        transformers_modeling_backend_full,
    )

    config = transformers_modeling_backend_full()
    config.hf_model = job.weights_dir
    config.debug.print_config = False
    # The backend accepts only spmd_backend="spmd_types" (its own check), whatever the target prefers.
    return config


@dataclass(frozen=True)
class Walkthrough:
    """What the walkthrough's config function of a scenario sets where titanflow's default mode sets otherwise:
    the values ``model_spec`` "walkthrough" trains with (each one a run may still override). Read from torchtitan
    0.3.0's functions (``qwen3_32b()``, ``qwen3_30b_a3b()`` in models/qwen3/config_registry.py,
    ``transformers_modeling_backend_full()`` in experiments/transformers_modeling_backend/config_registry.py;
    tests/unit/titan_cfg/test_walkthrough.py holds them to those functions). Each scenario's record carries its own
    (:attr:`Scenario.walkthrough`).

    ``config_function``: the torchtitan config function the values are read from, ``module:function`` (their source,
    which the test imports); ``warmup_steps``: the function's linear warm-up, which torchtitan caps to the run's
    steps (600 over a 10-step run is a warm-up of all 10); ``export_dtype``: its checkpoint's HF export dtype; ``activation_checkpoint``:
    "full" (FullAC) or "selective" (SelectiveAC); ``load_balance_coeff``: the MoE's expert-bias load balancing
    (torchtitan's MoE default; None for a dense model); ``attention``: the attention implementation
    (titan_cfg.kernels), "causal": the packed row as one sequence, as the walkthrough's fork trains it;
    ``rope_theta``: the RoPE base its model spec trains with where that is not config.json's (native's 4B flavor:
    1e6, :data:`titan_cfg.job.WALKTHROUGH_ROPE_THETA`), which the export's config.json then says; None: config.json's.
    """

    config_function: str
    warmup_steps: int
    export_dtype: str
    activation_checkpoint: str
    load_balance_coeff: float | None = None
    attention: str = "causal"
    rope_theta: float | None = None


@dataclass(frozen=True)
class Scenario:
    """A scenario: its base-config function and what the pipeline must know about it.

    ``model_type`` is the config.json model_type it trains ("qwen3" or "qwen3_moe"; the
    embedded tiny model of that type is its default weights); ``output_init`` names how
    the model initialises its output projection at random init (a key of
    ``titanflow.judge.expected_loss.OUTPUT_INIT_VARIANCE``); ``round_trip``: the export can be checked HF -> torchtitan
    -> HF (torchtitan's own models, not the transformers backend); what the scenario does differently on one
    node type (kernels, rank limit, seq_len, weights) is its row of :data:`ON_NODE`; ``compat`` names the compat layers
    (titan_cfg.compat.LAYERS) the ranks apply for this scenario, on every target;
    ``document_mask``: a token attends only within its document of a packed row (torchtitan's
    own models build that mask from per-document positions: ``Decoder.get_attention_masks``),
    or, when False, to every earlier token of the row (the transformers backend's default
    ``attn_mask_type`` "causal", which still gives per-document positions to RoPE).
    ``torchtitan_decoder``: the model is torchtitan's own decoder, whose modules a kernel with ``decoder_only``
    replaces (the transformers backend builds transformers' model instead).
    ``loss_chunks``: the sequence chunks of the loss (torchtitan's ``ChunkedLossWrapper``, ``loss.num_chunks`` of the
    rendered config: its default, 8, for torchtitan's own Qwen3 configs), which ``seq_len`` must be a multiple of,
    or None for an unchunked loss (the transformers backend's).
    ``walkthrough``: what the scenario's config function in the walkthrough sets, the values ``model_spec``
    "walkthrough" trains with (:class:`Walkthrough`).
    """

    build: Callable[[Job], "Trainer.Config"]
    description: str
    model_type: str
    output_init: str
    round_trip: bool
    walkthrough: Walkthrough
    compat: tuple[str, ...] = ()
    document_mask: bool = True
    torchtitan_decoder: bool = True
    loss_chunks: int | None = 8


SCENARIOS: dict[str, Scenario] = {
    "native": Scenario(
        native, "torchtitan native Qwen3 (dense), spec from the checkpoint's config.json",
        model_type="qwen3", output_init="normal_0.02", round_trip=True,
        walkthrough=Walkthrough("torchtitan.models.qwen3.config_registry:qwen3_32b", warmup_steps=600,
                                export_dtype="float16", activation_checkpoint="full", rope_theta=WALKTHROUGH_ROPE_THETA),
    ),
    "hf_backend": Scenario(
        hf_backend, "torchtitan's transformers modeling backend, model from the folder's config.json",
        model_type="qwen3", output_init="trunc_normal_inv_sqrt_hidden", round_trip=False, compat=("hf_backend",),
        document_mask=False, torchtitan_decoder=False, loss_chunks=None,
        walkthrough=Walkthrough(
            "torchtitan.experiments.transformers_modeling_backend.config_registry:transformers_modeling_backend_full",
            warmup_steps=2, export_dtype="float32", activation_checkpoint="selective"),
    ),
    "moe": Scenario(
        moe, "torchtitan native Qwen3 MoE (trimmed Qwen3-30B-A3B on trn2), RoPE through the kernel registry",
        model_type="qwen3_moe", output_init="normal_0.02", round_trip=True,
        walkthrough=Walkthrough("torchtitan.models.qwen3.config_registry:qwen3_30b_a3b", warmup_steps=600,
                                export_dtype="float16", activation_checkpoint="full", load_balance_coeff=1e-3),
    ),
}


def trained_rope_theta(job: Job) -> float:
    """The RoPE base ``job``'s model trains with: its scenario's walkthrough value in the walkthrough mode where the
    record has one (:attr:`Walkthrough.rope_theta`), else config.json's (either transformers layout)."""
    walkthrough = SCENARIOS[job.scenario].walkthrough.rope_theta if job.model_spec == "walkthrough" else None
    return job.shape.rope_theta if walkthrough is None else walkthrough


@dataclass(frozen=True)
class OnNode:
    """What one scenario does differently on one node type (a :class:`titan_cfg.targets.Target`'s ``node``), over the
    target's own record: ``kernels``, the implementation per op it selects there (over the target's defaults,
    titan_cfg.kernels); ``rank_limit``, (most ranks in all, why); ``seq_len``, its tokens per sequence there, over the
    target's; ``weights``, the Hub id (or folder) its runs and deployments there train (None: the embedded tiny model),
    and ``trim``, how they are cut (titanflow.weights.trim: ``layers``, ``experts``, ``top_k``)."""

    kernels: dict[str, str] = field(default_factory=dict)
    rank_limit: tuple[int, str] | None = None
    seq_len: int | None = None
    weights: str | None = None
    trim: dict[str, int] | None = None

    @property
    def run_parameters(self) -> dict:
        """The weights parameters a run of the scenario there takes (``weights``, ``trim``; {} for the embedded
        model): what its deployments and its nightly runs pass."""
        return {k: v for k, v in (("weights", self.weights), ("trim", self.trim)) if v is not None}


#: The walkthrough's models (AWS, "Train Qwen3 on AWS Trainium with torchtitan"): scenarios 1 and 2 fine-tune
#: Qwen3-4B-Instruct-2507 (https://huggingface.co/Qwen/Qwen3-4B-Instruct-2507), scenario 3 trains Qwen3-30B-A3B
#: (https://huggingface.co/Qwen/Qwen3-30B-A3B) trimmed to 4 layers, 64 experts, top-4 (the flow's trim_weights step).
#: Hub ids, so the runs know their weights id (the published 6.54 / 12.43 are keyed by it); the node reads them
#: offline from $TITANFLOW_WEIGHTS_ROOT/<id> or its HF cache (titanflow.weights.resolve).
WALKTHROUGH_DENSE, WALKTHROUGH_MOE = "Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-30B-A3B"
WALKTHROUGH_TRIM = {"layers": 4, "experts": 64, "top_k": 4}

#: (scenario, node type) -> what the scenario does differently there: the one table of what varies by scenario x
#: target. A pair that is not here runs as the target's record says, on the embedded tiny model.
ON_NODE: dict[tuple[str, str], OnNode] = {
    ("native", "trn2"): OnNode(weights=WALKTHROUGH_DENSE),
    # walkthrough scenario 1 keeps transformers_modeling_backend_full()'s 2048 tokens, the workload of its
    # published 6.54 / 12.43 (titan_cfg/published_expectations.toml)
    ("hf_backend", "trn2"): OnNode(weights=WALKTHROUGH_DENSE, seq_len=2048),
    ("hf_backend", "cpu"): OnNode(rank_limit=(1, "torchtitan 0.3.0's transformers backend needs "
                                              "spmd_backend='spmd_types', whose FSDP fails on CPU ('all parameters "
                                              "must be DTensors')")),
    ("moe", "trn2"): OnNode(kernels={"rope": "neuron"}, weights=WALKTHROUGH_MOE, trim=WALKTHROUGH_TRIM),
    ("moe", "cpu"): OnNode(kernels={"rope": "cpu"}),
    ("moe", "cuda"): OnNode(kernels={"rope": "cuda"}),
}


def on_node(scenario: str, node: str) -> OnNode:
    """The :data:`ON_NODE` row of ``scenario`` on ``node`` (a target's node type); an empty one where there is none."""
    return ON_NODE.get((scenario, node), OnNode())
