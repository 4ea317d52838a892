"""Flow parameters: :class:`ScenarioRun`, validated before anything runs.

Every check here is cheap (no torch import, no compute) and every error names
the field and the fix, so a bad ``prefect deployment run --param`` or CLI flag
fails in seconds rather than minutes into training.
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from titan_cfg import kernels
from titan_cfg.job import ExportDtype, Init, ModelSpecSource
from titan_cfg.scenarios import ON_NODE, SCENARIOS, Walkthrough, on_node
from titan_cfg.targets import TARGETS, Target, implied_scheduler
from titanflow import paths
from titanflow.hub_id import is_hub_id, looks_like_path
from titanflow.pairs import key_value_pairs

# Closed choices typed as such: the flows' signatures use them, so a deployment's parameter schema
# (enforced by the server) and the UI's run form refuse or offer exactly these values.
ScenarioName = Literal[tuple(SCENARIOS)]
TargetName = Literal[tuple(TARGETS)]


#: The longest training launch a run may ask for (s): a week.
MAX_TIMEOUT_S = 7 * 24 * 3600


class Tolerances(BaseModel):
    """How far a measured value may sit from its expectation (absolute, in nats)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    first_step_loss: float = Field(
        0.15,
        gt=0,
        description="random init: |measured - derived| first-step loss. 0.15 covers the batch "
        "mean of the target logit, measured at about +-0.06 (docs/measurements.md), with margin",
    )
    pretrained_first_step_loss: float = Field(
        0.05, gt=0, description="pretrained init: |measured - golden| first-step loss (nats), where the target "
        "does not compute the independent expectation")
    independent_first_step_loss: float = Field(
        5e-5, gt=0, description="pretrained init: |measured - independent expectation| (nats). torchtitan logs "
        "the loss to 5 decimals (+-5e-6) and both are fp32 sums of the same token losses in other orders: "
        "measured within 5e-6 on all three cpu scenarios (docs/measurements.md); a forward with the wrong "
        "attention mask is off by 1.3e-4")
    pretrained_gap: float = Field(
        2.0, gt=0, description="pretrained init: first-step loss at least this far below the random-init value, "
        "so weights that were silently not loaded fail")
    parity_kl: float = Field(1e-6, gt=0, description="max mean KL(trained || export) per token, nats (fp32 on CPU)")
    parity_top1: float = Field(1.0, gt=0, le=1, description="min top-1 agreement, trained vs export")
    parity_router: float = Field(1.0, gt=0, le=1, description="MoE: min fraction of (layer, token) pairs whose "
                                 "top-k experts are the same, trained vs export")


#: How the command line gives a :class:`Trim` (``--trim``).
TRIM_FORM = "layers=N,experts=E,top_k=K"


class Trim(BaseModel):
    """An MoE checkpoint cut down (titanflow.weights.trim): its first ``layers`` decoder layers, the first
    ``experts`` experts of each (the router's rows to match), ``top_k`` experts per token. The walkthrough's
    scenario 3 trims Qwen3-30B-A3B (48 layers, 128 experts, top-8) to 4, 64 and 4."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layers: int = Field(ge=1, description="decoder layers kept (the first ones)")
    experts: int = Field(ge=1, description="experts kept per layer (the first ones)")
    top_k: int = Field(ge=1, description="experts routed per token")

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value):
        """Accept ``"layers=4,experts=64,top_k=4"`` (command line) as well as a mapping."""
        if isinstance(value, str):
            return key_value_pairs(value, "trim", TRIM_FORM)
        return value

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> Trim:
        if self.top_k > self.experts:
            raise ValueError(f"trim: top_k {self.top_k} exceeds experts {self.experts}; fix: route to at most the experts "
                             f"kept (top_k={self.experts} or less)")
        return self


#: A run id: a folder name under the runs folder (no path separators, not starting with a dot).
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: The longest run id: a folder name, well within the file systems' 255-byte name limit with what is named after it
#: (``compare-<run id>.png``, a ``.partial`` sibling).
RUN_ID_MAX = 128


def new_run_id(run: ScenarioRun) -> str:
    """``<scenario>-<target>-<init>-<UTC time>-<4 hex>``: sortable and unique."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{run.scenario}-{run.target}-{run.init}-{stamp}-{secrets.token_hex(2)}"


def _shown(value) -> str:
    """A target's or scenario's value as an option's help gives it: kernels as ``op=impl,op=impl``, a rank limit
    ``(most ranks, why)`` as ``at most N rank(s)``, anything else as it prints."""
    if isinstance(value, tuple):
        return f"at most {value[0]} rank(s)"
    return ",".join(f"{op}={impl}" for op, impl in value.items()) if isinstance(value, dict) else str(value)


def _each_target(field: str) -> str:
    """``cpu 4, trn2 64, ...``: a :class:`titan_cfg.targets.Target` field's value on each target, for the help of the
    option that defaults to it (built from TARGETS, so the help cannot drift from the targets)."""
    return ", ".join(f"{name} {_shown(getattr(target(), field))}" for name, target in TARGETS.items())


def _each_scenario(field: str) -> str:
    """``hf_backend on trn2: 2048``: where a scenario's own value (a :class:`titan_cfg.scenarios.OnNode` field) replaces
    or caps the target's on a node type, for the option's help (built from ON_NODE)."""
    return ", ".join(f"{name} on {node}: {_shown(getattr(row, field))}" for (name, node), row in ON_NODE.items()
                     if getattr(row, field))


class ScenarioRun(BaseModel):
    """One scenario run as the user asked for it; ``None`` means "the target's default".

    Sizes are counts: ``global_batch_size`` sequences per step over all ranks,
    ``seq_len`` tokens per sequence; ``timeout_s`` seconds for the training launch.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    scenario: str = Field("native", description="; ".join(f"{name}: {s.description}" for name, s in SCENARIOS.items()))
    target: str = Field("cpu", description=f"one of: {', '.join(TARGETS)} (titan_cfg/targets.py)")
    init: Init = Field("random", description="random | pretrained")
    weights: str | None = Field(None, description="local HF folder or Hub id; None: the embedded tiny Qwen3 "
                                "(random init) or its pretrained checkpoint (pretrained init)")
    trim: Trim | None = Field(None, description="moe: train the weights trimmed (titanflow.weights.trim), "
                              "as layers=N,experts=E,top_k=K or a JSON object; None: as they are")
    model_spec: ModelSpecSource = Field("config", description="config (titanflow's defaults: the native spec from "
                                        "config.json) or walkthrough (every setting as the AWS walkthrough's config "
                                        "functions state it: native's spec as model_registry('4B', "
                                        "attn_backend='sdpa') builds it, attention causal over the packed row, and the "
                                        "functions' warm-up, export dtype, activation checkpointing and MoE load "
                                        "balancing: each scenario's walkthrough in titan_cfg.scenarios; a parameter "
                                        "given still wins)")
    steps: int = Field(10, ge=1, description="optimizer steps to train")
    checkpoint_interval: int | None = Field(
        None, ge=1, description="steps between full training-state checkpoints, which a retried launch resumes "
        "from (at most steps; steps: only the final export); None: the target's, at most steps ("
        + _each_target("checkpoint_interval") + ")")
    global_batch_size: int | None = Field(None, ge=1, description="sequences per optimizer step over all ranks, a "
                                          "multiple of the world size; None: the target's ("
                                          + _each_target("global_batch_size") + ")")
    seq_len: int | None = Field(None, ge=16, description="tokens per sequence; None: the scenario's own on the "
                                "target (" + _each_scenario("seq_len") + "), else the target's ("
                                + _each_target("seq_len") + ")")
    nnodes: int | None = Field(None, ge=1, description="nodes (torchrun --nnodes); more than one runs as one Slurm "
                               "job (titanflow.launch.slurm) unless scheduler says kubernetes; None: the target's ("
                               + _each_target("nnodes") + ")")
    nproc_per_node: int | None = Field(None, ge=1, description="ranks per node (torchrun --nproc-per-node); world size "
                                       "= nnodes x nproc_per_node; None: the target's ("
                                       + _each_target("nproc_per_node") + "), within the scenario's limit ("
                                       + _each_scenario("rank_limit") + ")")
    scheduler: Literal["slurm", "kubernetes"] | None = Field(
        None, description="how the nodes are started: slurm (one Slurm job, titanflow.launch.slurm) or kubernetes (the flow "
        "in pod 0 of the Kubernetes job of the trn2-eks work pool, titanflow.launch.kubernetes); None: slurm on more than "
        "one node, else the target's")
    lr: float = Field(8e-4, gt=0, description="peak learning rate (AdamW)")
    warmup_steps: int | None = Field(None, ge=0, description="linear lr warm-up steps; None: min(2, steps), or "
                                     "in the walkthrough mode the scenario's config function's, capped to steps")
    seed: int = Field(0, ge=-2**63, le=2**64 - 1, description="torchtitan's debug.seed: the random initialisation of "
                      "the weights (torch.manual_seed's range, -2**63 to 2**64 - 1)")
    export_dtype: ExportDtype | None = Field(None, description="float32 | bfloat16 | float16; None: float32, or in "
                                             "the walkthrough mode the scenario's config function's")
    compile: bool = Field(False, description="true | false: torch.compile the model (warm-up fills the cache)")
    kernels: dict[str, str] | None = Field(
        None, description="kernel implementation per op, over the target's and scenario's choice "
        f"(titan_cfg/scenarios.py), as op=impl[,op=impl] or a JSON object; known: {kernels.known()}; the targets': "
        + _each_target("kernels") + "; the scenarios': " + _each_scenario("kernels"))
    timeout_s: float = Field(1800, gt=0, le=MAX_TIMEOUT_S, description="seconds before a training launch is killed (each attempt: "
                             "an infrastructure failure is retried twice)")
    runs_dir: str | None = Field(None, min_length=1, description="parent of runs/<run-id>; None: $TITANFLOW_RUNS or "
                                                                 "<repo>/runs")
    run_id: str | None = Field(None, pattern=RUN_ID_PATTERN, max_length=RUN_ID_MAX, description="the run's folder name under runs_dir; "
                                "None: <scenario>-<target>-<init>-<UTC time>-<4 hex>")
    resume: str | None = Field(None, pattern=RUN_ID_PATTERN, max_length=RUN_ID_MAX, description="the id of a failed, "
                               "cancelled or killed run to continue in its own folder, from its newest complete step "
                               "checkpoint (titanflow.run.resume); its parameters are kept: give none that change the job")
    from_step_1: bool = Field(False, description="true | false: with resume, when every complete step checkpoint of "
                              "the run is damaged (each set aside, titanflow.launch.step_checkpoint), train it again from "
                              "step 1 instead of refusing")
    tolerances: Tolerances = Tolerances()

    @field_validator("scenario", "target")
    @classmethod
    def _known(cls, value: str, info) -> str:
        """A field check, not the model's: reported beside every other field's error in one refusal."""
        known = SCENARIOS if info.field_name == "scenario" else TARGETS
        if value not in known:
            mode = (" (the walkthrough's settings are a mode of every scenario: --model-spec walkthrough)"
                    if info.field_name == "scenario" and value == "walkthrough" else "")
            raise ValueError(f"unknown {value!r}; fix: pass one of {', '.join(known)}{mode}")
        return value

    @field_validator("kernels", mode="before")
    @classmethod
    def _parse_kernels(cls, value):
        """Accept ``"rope=cpu,attention=sdpa"`` (command line) as well as a mapping."""
        if isinstance(value, str):
            return key_value_pairs(value, "kernels", "op=impl[,op=impl] (e.g. rope=cpu)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _trim_for_moe_only(cls, value):
        """A trim of a dense scenario is refused before the trim's own keys are read: whatever they say, it is the
        scenario that is wrong."""
        if isinstance(value, dict) and value.get("trim") is not None:
            name = value.get("scenario") or "native"
            if name in SCENARIOS and SCENARIOS[name].model_type != "qwen3_moe":
                raise ValueError(f"trim: only MoE weights are trimmed; {name} trains a dense model; fix: run the moe "
                                 "scenario, or drop --trim")
        return value

    @model_validator(mode="before")
    @classmethod
    def _nproc_keyword(cls, value):
        """``nproc`` given is ``nproc_per_node`` (the keyword titanflow doctor passes for its ``--nproc``). Recorded
        parameters are not read back through it: ``nproc`` in summaries written before runs had nodes is read by
        titanflow.judge.workload (the workload key) and titanflow.record.schema.world_size."""
        if isinstance(value, dict) and "nproc" in value:
            value = dict(value)
            nproc = value.pop("nproc")
            if value.get("nproc_per_node") is None:
                value["nproc_per_node"] = nproc
        return value

    @model_validator(mode="after")
    def _check(self) -> "ScenarioRun":
        """The checks across fields, every one: all that fail are raised together, a line each (field, what is
        wrong, the fix)."""
        problems: list[str] = []
        for check in (self._ranks_problems, self._steps_problems, self._shape_problems, self._weights_problems):
            try:
                for problem in check():
                    problems.append(problem)
            except ValueError as err:  # a check of another module (a kernel's shape, a resumed id) raises its own
                problems.append(str(err))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _every_error(cls, data, handler):
        """Every error of one bad input at once: where a field fails its own validation (the checks across fields
        then never run), the input is validated again without the fields that failed (their defaults in their
        place), and the checks across fields that fail then are added, those that name a failed field left out
        (they would speak of its default, not of the value given)."""
        try:
            return handler(data)
        except ValidationError as err:
            failed = {str(error["loc"][0]) for error in err.errors() if error["loc"]}
            if not isinstance(data, dict) or not failed:
                raise
            try:
                handler({key: value for key, value in data.items() if key not in failed})
            except ValidationError as again:
                lines = [line for error in again.errors() if not error["loc"]
                         for line in str(error["ctx"]["error"] if "error" in error.get("ctx", {}) else error["msg"]
                                          ).splitlines()
                         if not any(re.search(rf"\b{name}\b", line) for name in failed)]
                if lines:
                    raise ValidationError.from_exception_data(cls.__name__, [*err.errors(), {
                        "type": "value_error", "loc": (), "input": data,
                        "ctx": {"error": ValueError("\n".join(lines))}}]) from None
            raise

    def _ranks_problems(self) -> Iterator[str]:
        """The ranks: within the scenario's limit and the node's cores, dividing the global batch."""
        limit = on_node(self.scenario, self.target_spec.node).rank_limit
        if limit and self.world_size > limit[0]:
            yield (f"nproc_per_node: {self.scenario} on {self.target} runs on at most {limit[0]} rank(s) "
                   f"in all (world size {self.nnodes_resolved} x {self.nproc_per_node_resolved}): {limit[1]}; fix: "
                   f"pass --nproc-per-node {limit[0]} or fewer on one node")
        most_ranks = self.target_spec.max_nproc_per_node or os.cpu_count() or 1
        if self.nproc_per_node_resolved > most_ranks:
            yield (f"nproc_per_node: {self.nproc_per_node_resolved} ranks on a node, but a {self.target} node "
                   f"has {most_ranks}; fix: pass --nproc-per-node {most_ranks} or fewer")
        if self.global_batch_size_resolved % self.world_size:
            # the field named is the one given: a batch given alone is the batch's fault, else the ranks'
            field = ("global_batch_size" if self.global_batch_size is not None and not (self.nproc_per_node or self.nnodes)
                     else "nproc_per_node" if self.nproc_per_node or not self.nnodes else "nnodes")
            below = self.global_batch_size_resolved // self.world_size * self.world_size
            above = below + self.world_size
            multiple = f"{below} or {above}" if below else str(above)  # the smaller may be what memory allows
            yield (f"{field}: world size {self.world_size} ({self.nnodes_resolved} node(s) x "
                   f"{self.nproc_per_node_resolved}) does not divide global_batch_size {self.global_batch_size_resolved}; "
                   f"fix: a global_batch_size that is a multiple of the world size (e.g. --global-batch-size {multiple}), "
                   "or ranks that divide it")

    def _steps_problems(self) -> Iterator[str]:
        """The steps: within the time limit; the checkpoint interval and the warm-up within them; a resumed id."""
        fastest_s = self.steps * self.target_spec.min_step_s
        if fastest_s > self.timeout_s:
            longer = (f" or a longer --timeout-s (at most {MAX_TIMEOUT_S})" if self.timeout_s < MAX_TIMEOUT_S
                      else f" (--timeout-s {MAX_TIMEOUT_S} is the longest)")
            yield (f"steps: {self.steps} steps take at least {fastest_s:,.2f} s on {self.target} "
                   f"({self.target_spec.min_step_s} s a step at best), beyond timeout_s {self.timeout_s:,.0f}; "
                   f"fix: pass at most {int(self.timeout_s / self.target_spec.min_step_s)} steps{longer}")
        if self.checkpoint_interval is not None and self.checkpoint_interval > self.steps:
            yield (f"checkpoint_interval: {self.checkpoint_interval} exceeds steps {self.steps}; fix: pass at "
                   f"most {self.steps} (then only the final export is saved)")
        if self.warmup_steps is not None and self.warmup_steps > self.steps:
            yield f"warmup_steps: {self.warmup_steps} exceeds steps {self.steps}; fix: pass at most {self.steps}"
        check_resumed_id(self.resume, self.run_id)
        if self.from_step_1 and self.resume is None:
            yield ("from_step_1: true without resume; a new run starts at step 1 anyway; fix: drop --from-step-1, or "
                   "pass --resume <run-id> with it")

    def _shape_problems(self) -> Iterator[str]:
        """The sequence length against the scenario's loss chunks, and each chosen kernel against the shapes and the
        model it replaces a module of."""
        chunks = SCENARIOS[self.scenario].loss_chunks
        if chunks and self.seq_len_resolved % chunks:
            lower = self.seq_len_resolved // chunks * chunks
            yield (f"seq_len: {self.seq_len_resolved} tokens do not split into the {chunks} chunks of "
                   f"{self.scenario}'s loss (torchtitan's ChunkedLossWrapper); fix: pass a multiple of {chunks}, "
                   f"e.g. --seq-len {max(lower, 16)} or {lower + chunks}")
        for op, name in self.kernels_resolved.items():  # KernelChoiceError (a ValueError) names the op and the fix
            implementation = kernels.implementation(op, name)
            implementation.check_shape(self.seq_len_resolved, self.target_spec.lnc)
            if implementation.decoder_only and not SCENARIOS[self.scenario].torchtitan_decoder:
                upstream = next(n for n, i in kernels.OPS[op].implementations.items() if not i.decoder_only)
                yield (f"kernels: {op}={name} replaces a module of torchtitan's own decoder; {self.scenario} trains "
                       f"transformers' model (the transformers backend computes it inside transformers); fix: pass "
                       f"--kernels {op}={upstream}")

    def _weights_problems(self) -> Iterator[str]:
        """The weights given: a folder here (not a file) or a Hub id."""
        if self.weights is None:
            return
        if not self.weights.strip():  # else it would name the working directory
            yield ("weights: empty; fix: give a local HF folder or a Hub id, or leave --weights out for the "
                   "embedded tiny model")
            return
        if looks_like_path(self.weights):
            given = os.path.expanduser(self.weights)
            if not os.path.exists(given):  # os.path's: False, not an OSError, for a name too long to look up
                yield f"weights: folder {self.weights} does not exist; fix: give a local HF folder or a Hub id"
            elif not os.path.isdir(given):
                yield (f"weights: {self.weights} is a file; fix: give the model's folder (the one holding its "
                       "config.json), or a Hub id")
        elif not is_hub_id(self.weights):
            yield (f"weights: {self.weights!r} is neither a folder here nor a Hub id (org/name of ASCII "
                   "letters, digits, '-', '_' and '.'); fix: give a local HF folder or a Hub id")

    @property
    def target_spec(self) -> Target:
        """The :class:`Target` named by ``target``."""
        return TARGETS[self.target]()

    @property
    def walkthrough(self) -> Walkthrough | None:
        """The scenario's walkthrough settings (its record's ``walkthrough``, titan_cfg.scenarios.Walkthrough) in the
        walkthrough mode, else None."""
        return SCENARIOS[self.scenario].walkthrough if self.model_spec == "walkthrough" else None

    @property
    def kernels_resolved(self) -> dict[str, str]:
        """Implementation per op: the target's defaults, then the scenario's choice for the target, then the
        walkthrough mode's attention, then ``kernels`` (titan_cfg.kernels.resolve)."""
        node = self.target_spec.node
        mode = {"attention": self.walkthrough.attention} if self.walkthrough else None
        return kernels.resolve(self.target_spec.device, self.target_spec.kernels, on_node(self.scenario, node).kernels,
                               mode, self.kernels)

    @property
    def export_dtype_resolved(self) -> str:
        """The HF export's dtype: as given, else the walkthrough mode's, else float32."""
        return self.export_dtype or (self.walkthrough.export_dtype if self.walkthrough else "float32")

    @property
    def activation_checkpoint_resolved(self) -> str:
        """Activation checkpointing ("none", "full", "selective"): the walkthrough mode's, else the target's."""
        return self.walkthrough.activation_checkpoint if self.walkthrough else self.target_spec.activation_checkpoint

    @property
    def load_balance_coeff_resolved(self) -> float | None:
        """The MoE's expert-bias load balancing: the walkthrough mode's (upstream's 1e-3), else None (off)."""
        return self.walkthrough.load_balance_coeff if self.walkthrough else None

    @property
    def nnodes_resolved(self) -> int:
        """Nodes: ``nnodes`` as given, else the target's."""
        return self.nnodes or self.target_spec.nnodes

    @property
    def nproc_per_node_resolved(self) -> int:
        """Ranks per node: ``nproc_per_node`` as given, else the target's, capped by the scenario's limit there
        (a limit on the world size: with the target's nodes, at most limit // nodes, and at least 1)."""
        if self.nproc_per_node:
            return self.nproc_per_node
        target = self.target_spec
        limit = on_node(self.scenario, target.node).rank_limit
        return max(1, min(target.nproc_per_node, limit[0] // self.nnodes_resolved)) if limit else target.nproc_per_node

    @property
    def world_size(self) -> int:
        """Ranks over all nodes: ``nnodes_resolved x nproc_per_node_resolved``."""
        return self.nnodes_resolved * self.nproc_per_node_resolved

    @property
    def scheduler_resolved(self) -> str:
        """``scheduler`` as given, else the implied one (titan_cfg.targets.implied_scheduler): ``slurm`` for a run
        on more than one node or on a target Slurm schedules (titanflow.launch.slurm), else ``local`` (torchrun here)."""
        return self.scheduler or implied_scheduler(self.target, self.nnodes_resolved)

    @property
    def global_batch_size_resolved(self) -> int:
        """Sequences per step over all ranks: as given, else the target's."""
        return self.global_batch_size or self.target_spec.global_batch_size

    @property
    def seq_len_resolved(self) -> int:
        """Tokens per sequence: as given, else the scenario's on the target's node type, else the target's."""
        return (self.seq_len or on_node(self.scenario, self.target_spec.node).seq_len
                or self.target_spec.seq_len)

    @property
    def checkpoint_interval_resolved(self) -> int:
        """Steps between full training-state checkpoints: as given, else the target's, at most ``steps``."""
        return self.checkpoint_interval or min(self.target_spec.checkpoint_interval, self.steps)

    @property
    def warmup_steps_resolved(self) -> int:
        """Warm-up steps: as given, else the mode's default for ``steps`` (:func:`resolved_warmup_steps`)."""
        return resolved_warmup_steps(self.steps, self.warmup_steps, self.scenario, self.model_spec)

    def runs_root(self) -> Path:
        """Parent folder of this run's ``<run-id>/``."""
        return Path(self.runs_dir).resolve() if self.runs_dir else paths.runs_root()


def resolved_warmup_steps(steps: int, warmup_steps: int | None, scenario: str = "native",
                          model_spec: str = "config") -> int:
    """The linear lr warm-up a run of ``steps`` trains with: ``warmup_steps`` as given, else min(2, steps) (two
    steps of warm-up keep the first updates of the tiny models small), or in the walkthrough mode the scenario's
    config function's (its record's ``walkthrough``, titan_cfg.scenarios) capped to ``steps``, as torchtitan caps it
    (components/optimizer/lr_scheduler.py: "Warmup steps exceed total steps")."""
    if warmup_steps is not None:
        return warmup_steps
    default = (SCENARIOS[scenario].walkthrough.warmup_steps if model_spec == "walkthrough" and scenario in SCENARIOS
               else 2)
    return min(default, steps)


#: The weight inits a run takes (titan_cfg.job.Init); a nightly suite runs each per scenario.
INITS: tuple[str, ...] = get_args(Init)


def check_resumed_id(resume: str | None, run_id: str | None) -> None:
    """A resumed run keeps its id: a ``run_id`` given beside ``resume`` must be the same (another would be dropped
    unsaid).

    Raises:
        ValueError: naming ``run_id``.
    """
    if resume is not None and run_id is not None and run_id != resume:
        raise ValueError(f"run_id: {run_id} is not the resumed run {resume}; a resumed run keeps its id; fix: drop "
                         "--run-id")


