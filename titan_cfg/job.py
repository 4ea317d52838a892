"""The job file: one rendered run, as torchrun's ranks read it.

``render_config`` writes ``runs/<id>/job/job.json``; the torchrun entry module
and the ``titanflow_job`` config function read it back through
``$TITANFLOW_JOB``. Every path in it is absolute, every size resolved, so the
file alone reproduces the torchtitan config. The model's shape is read from the weights
folder's config.json once, when the job is rendered, and stored here: every later step
(the ranks, the export checks, the loss verdict) reads it from the job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from titan_cfg.model_spec import Qwen3MoeShape, Qwen3Shape
from titan_cfg.targets import Scheduler, implied_scheduler

#: Environment variable naming the job file inside torchrun's ranks.
JOB_ENV = "TITANFLOW_JOB"
#: The job file's name in ``runs/<id>/job/``.
JOB_FILE = "job.json"

#: Weight inits of a run: torchtitan's random init, or the weights folder's safetensors.
Init = Literal["random", "pretrained"]
#: Whether each init starts from the weights folder's safetensors (loaded weights) rather than torchtitan's
#: random init: what the loss verdict's expectation sources read (titanflow.judge.expectations).
LOADS_WEIGHTS: dict[Init, bool] = {"random": False, "pretrained": True}
#: dtypes of the Hugging Face export (torchtitan's ``checkpoint.export_dtype``).
ExportDtype = Literal["float32", "bfloat16", "float16"]
#: A dense or MoE Qwen3 shape, told apart by config.json's ``model_type``.
ModelShape = Union[Qwen3Shape, Qwen3MoeShape]

#: torchtitan's checkpoint folder name under the dump folder (its default).
CHECKPOINT_FOLDER = "checkpoint"
#: torchtitan's TensorBoard folder under the dump folder (its default ``save_tb_folder``): each launch's event files
#: go to ``<TB_FOLDER>/<YYYYmmdd-HHMM>/`` (titan_cfg.trainer_config turns the logger on; titanflow.launch.event_files).
TB_FOLDER = "tb"
#: Full training-state checkpoints torchtitan keeps (its ``keep_latest_k``; older ones are deleted after each
#: save): the newest may be a save cut short, so the one before it must still be there. The final step's HF
#: export is not counted (torchtitan purges only after interval saves).
KEEP_LATEST_K = 2
#: The run's mode: "config", titanflow's defaults (the native spec from the weights folder's config.json), or
#: "walkthrough", every setting as the AWS walkthrough's config functions state it (the native spec as
#: ``model_registry("4B", attn_backend="sdpa")`` builds it, and titan_cfg.scenarios.Scenario.walkthrough).
ModelSpecSource = Literal["config", "walkthrough"]
#: What torchtitan's Qwen3 "4B" flavor hard-codes beyond the shape (``model_registry("4B")``, the walkthrough's native
#: spec): its RoPE base and context (tests/unit/titan_cfg/test_walkthrough.py holds both to the flavor).
WALKTHROUGH_ROPE_THETA, WALKTHROUGH_CONTEXT = 1e6, 40960


class PublishedFirstStep(BaseModel):
    """A published first-step loss that applies to the job (titan_cfg.published), as recorded in
    job.json: ``role`` "expectation" (pretrained init on the figure's workload: the run is held to it
    within ``band``) or "beside" (reported next to the expectation that decides)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_step_loss: float   # nats
    band: float              # allowed |measured - figure| (nats), when it is the expectation
    source: str              # where it is published, with its conditions
    role: Literal["expectation", "beside"]
    workload_differences: list[str] = []  # the job's workload against the figure's; empty when the same


class Job(BaseModel):
    """A fully resolved training job (sizes are counts; lr is per-step AdamW lr)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    scenario: str
    target: str
    init: Init
    weights_dir: str         # HF folder: config.json, tokenizer (and weights when pretrained)
    shape: ModelShape = Field(discriminator="model_type")  # the folder's config.json, read once at render
    world_size: int          # ranks over all nodes
    nnodes: int = Field(1, ge=1)  # nodes the ranks run on (world_size / nnodes each); 1 is left out of job.json
    # how the nodes are started (titan_cfg.targets.Scheduler); left out of job.json when it is the implied one
    # (titan_cfg.targets.implied_scheduler: slurm on more than one node, else the target's)
    scheduler: Scheduler = "local"
    dataset_path: str        # c4_test-format folder (JSON lines with "text")
    dataset: str = "botchan"  # the text's name (titanflow.launch.dataset): botchan (cpu) or c4_test (trn2)
    dataset_located_by: str | None = None  # how dataset_path was found (titanflow.launch.dataset)
    dump_folder: str         # torchtitan's output folder for this run
    steps: int
    # steps between full training-state saves a retry resumes from (the last step is the model-only HF export);
    # None: the last step only (job files written before it existed)
    checkpoint_interval: int | None = Field(None, ge=1)
    global_batch_size: int   # sequences per step over all ranks
    local_batch_size: int    # sequences per step per rank
    seq_len: int             # tokens per sequence
    lr: float
    warmup_steps: int
    seed: int
    export_dtype: ExportDtype
    compile: bool
    kernels: dict[str, str]  # implementation per op (titan_cfg.kernels), e.g. {"rope": "cpu", "attention": "sdpa"}
    spmd_backend: str | None
    compile_backend: str | None
    activation_checkpoint: Literal["none", "full", "selective"]
    # the MoE's expert-bias load balancing (titan_cfg.model_spec._layers): None (off) but in the walkthrough mode
    load_balance_coeff: float | None = None
    mixed_precision_param: Literal["float32", "bfloat16"]
    weights_id: str | None = None  # which published weights the folder holds, if known (titanflow.weights.identity)
    published: PublishedFirstStep | None = None  # the published first-step loss for this job, if any
    # config (titanflow's defaults) or walkthrough (titan_cfg.scenarios.Scenario.walkthrough)
    model_spec: ModelSpecSource = "config"
    files_only: bool = False  # `titanflow render`: written to be read, not run; weights checked for config.json only

    @model_validator(mode="before")
    @classmethod
    def _scheduler_implied(cls, data):
        """A job file without ``scheduler`` has the implied one. The job file is titan_cfg's own, read on the ranks,
        and carries no ``schema_version`` (titanflow.record.schema versions summary.json and the history): a field
        added since is optional, its default what a file without it meant, and nnodes and scheduler are left out
        when implied, so a job file stays byte for byte what it was (the golden renders)."""
        if isinstance(data, dict) and "scheduler" not in data and "target" in data:
            data = {**data, "scheduler": implied_scheduler(data["target"], data.get("nnodes", 1))}
        return data

    @model_serializer(mode="wrap")
    def _one_node_as_before(self, handler):
        """``nnodes`` 1 and the implied scheduler are not written: a job file stays byte for byte what it was
        before jobs had nodes and schedulers."""
        data = handler(self)
        if data.get("scheduler") == implied_scheduler(self.target, self.nnodes):
            data.pop("scheduler")
        if data.get("nnodes") == 1:
            data.pop("nnodes")
        return data

    @property
    def nproc_per_node(self) -> int:
        """Ranks per node: ``world_size / nnodes``."""
        return self.world_size // self.nnodes

    @property
    def tied(self) -> bool:
        """The checkpoint ties lm_head to the embedding (config.json ``tie_word_embeddings``)."""
        return self.shape.tie_word_embeddings

    @property
    def export_step_dir(self) -> Path:
        """Where torchtitan's ``last_save_in_hf`` writes the final step's safetensors."""
        return Path(self.dump_folder) / CHECKPOINT_FOLDER / f"step-{self.steps}"

    def write(self, path: Path) -> Path:
        """Write as indented JSON; returns ``path``."""
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path | None = None) -> "Job":
        """Read ``path``, or the file named by ``$TITANFLOW_JOB``.

        Raises:
            RuntimeError: neither given.
        """
        if path is None:
            if JOB_ENV not in os.environ:
                raise RuntimeError(f"${JOB_ENV} is not set: titan_cfg configs run from a rendered job file")
            path = Path(os.environ[JOB_ENV])
        return cls.model_validate_json(Path(path).read_text())
