"""Checks that run before anything is trained or written, shared by the CLI and the flow.

Nothing here trains, builds or imports torch in this process: parameters, the
target's runtime, the runs folder, and the model's config.json against the
requested shapes and ``trim``: a local weights folder's, a Hub id's copy on this
machine (none while offline is refused), or the embedded tiny model's fields
(titanflow.assets.TinySpec.config_fields), known before the flow builds it. Each
failure is a :class:`ValueError` whose message starts with the field to change.
"""

from __future__ import annotations

import datetime
import os
import secrets
from pathlib import Path

from pydantic import ValidationError

from titan_cfg.model_spec import Qwen3Shape, config_shape, qwen3_shape, read_config
from titan_cfg.scenarios import SCENARIOS
from titanflow.run.params import TRIM_FORM, ScenarioRun, check_runs_dir_writable, is_hub_id


def new_run_id(run: ScenarioRun) -> str:
    """``<scenario>-<target>-<init>-<UTC time>-<4 hex>``: sortable and unique."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{run.scenario}-{run.target}-{run.init}-{stamp}-{secrets.token_hex(2)}"


#: The fix for each kind of pydantic error (its ``type``), filled from the error's ``ctx``; the kinds a
#: ScenarioRun or Trim field can raise. Errors raised by the models' own checks (``value_error``) already
#: end with their fix.
FIXES = {
    "greater_than_equal": "pass {ge} or more",
    "greater_than": "pass more than {gt}",
    "less_than_equal": "pass {le} or less",
    "less_than": "pass less than {lt}",
    "int_parsing": "pass a whole number",
    "int_type": "pass a whole number",
    "int_from_float": "pass a whole number",
    "float_parsing": "pass a number",
    "float_type": "pass a number",
    "finite_number": "pass a finite number",
    "bool_parsing": "pass true or false",
    "bool_type": "pass true or false",
    "literal_error": "pass {expected}",
    "string_pattern_mismatch": "pass a value matching {pattern}",
    "string_too_long": "pass at most {max_length} characters",
    "string_type": "pass text",
    "dict_type": "pass op=impl[,op=impl] or a JSON object",
    "model_type": "pass layers=N,experts=E,top_k=K or a JSON object",
}


def _option(loc: tuple) -> str:
    """How a user names the field: ``--nproc`` for a top-level field; for a nested one the option and its key,
    ``--trim layers=`` (the form ``--trim layers=N,experts=E,top_k=K`` takes)."""
    parts = [str(part) for part in loc]
    option = f"--{parts[0].replace('_', '-')}"
    return option if len(parts) == 1 else f"{option} {'.'.join(parts[1:])}="


def _given(value) -> str:
    return value if isinstance(value, str) and value else repr(value)


def describe(err: ValidationError) -> str:
    """One line per pydantic error: ``field: what is wrong, given <value>; fix: <what to pass>`` (the fix from
    :data:`FIXES`), without pydantic's links and input dumps. A model's own check (``value_error``) names its
    field and fix itself and is kept as it is; a missing field reads ``field: missing; fix: pass --field``."""
    lines = []
    for error in err.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        kind = error["type"]
        if kind == "value_error" or not field:  # whole-model checks already start with the field they are about
            lines.append(f"{field}: {message}" if field and not message.startswith(f"{field}:") else message)
        elif kind == "missing" and error["loc"][0] == "trim":  # a key of --trim's form: the whole form is the fix
            lines.append(f"{field}: missing; fix: pass --trim {TRIM_FORM}")
        elif kind == "missing":
            lines.append(f"{field}: missing; fix: pass {_option(error['loc'])}")
        elif kind == "extra_forbidden":
            lines.append(f"{field}: not a parameter; fix: drop {_option(error['loc'])}")
        else:
            ctx = {key: f"{value:g}" if isinstance(value, float) else value for key, value in error.get("ctx", {}).items()}
            fix = FIXES.get(kind, "pass a value its --help describes").format(**ctx)
            lines.append(f"{field}: {message}, given {_given(error['input'])}; fix: {fix} for {_option(error['loc'])}")
    return "\n".join(lines)


def check_weights_folder(run: ScenarioRun, folder: Path, complete: bool = True) -> Qwen3Shape:
    """The folder is a Qwen3 HF folder with a tokenizer, and ``seq_len`` fits its context; returns
    the model shape its config.json gives (the one read of it: the job stores it). ``complete=False``
    (a files-only render, ``titanflow render``) checks config.json alone: tokenizer, index and
    safetensors are what a launch needs, checked when the job is rendered to run.

    Raises:
        ValueError: naming ``weights`` or ``seq_len``.
    """
    if folder.is_file():
        raise ValueError(f"weights: {folder} is a file; fix: pass the folder that holds config.json")
    shape = qwen3_shape(folder, SCENARIOS[run.scenario].model_type)  # ConfigError names the config.json field
    check_shape_fits(run, shape)
    if not complete:
        return shape
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"weights: {folder} has no tokenizer.json; torchtitan reads the tokenizer from it; "
                         "fix: copy the model's tokenizer.json into the folder")
    check_tokenizer_fits(folder, shape.vocab_size)
    from titanflow.weights.check import check_checkpoint, check_save_index

    check_save_index(folder)  # the export is sharded by this index, whatever the init
    if run.init == "pretrained":
        from titan_cfg.trainer_config import check_pretrained_source

        check_pretrained_source(folder)
        check_checkpoint(folder)  # every shard and tensor the load reads, before any rank starts
    return shape


def check_hub_weights(run: ScenarioRun) -> None:
    """A Hub id's weights, before the flow's pull_weights downloads them: the config.json of the copy already on this
    machine (titanflow.weights.resolve.local_copy) fits the run (:func:`check_weights_folder`); with no copy and
    ``HF_HUB_OFFLINE`` set, the download cannot happen, and the run would fail at pull_weights.

    Raises:
        ValueError: naming ``weights`` (with the ``hf download`` that makes the copy), or as
            :func:`check_weights_folder`.
    """
    from huggingface_hub import constants

    from titanflow.weights.resolve import download_command, local_copy

    copy = local_copy(run.weights)
    if copy is not None and (copy / "config.json").is_file():  # a partial snapshot without one: the download's to finish
        check_weights_folder(run, copy, complete=False)
    elif copy is None and constants.HF_HUB_OFFLINE:
        raise ValueError(f"weights: {run.weights} is not on this machine (not under $TITANFLOW_WEIGHTS_ROOT, not in the "
                         "Hugging Face cache) and HF_HUB_OFFLINE forbids downloading it; fix: "
                         f"{download_command(run.weights)} where there is network, or unset HF_HUB_OFFLINE")


def check_shape_fits(run: ScenarioRun, shape: Qwen3Shape) -> None:
    """The run's sequences fit the model's context, and a rank holds the loss's logits (:func:`check_logits_fit`).

    Raises:
        ValueError: naming ``seq_len``, ``global_batch_size`` or ``weights``, with the value that fits.
    """
    if run.seq_len_resolved > shape.max_position_embeddings:
        raise ValueError(
            f"seq_len: {run.seq_len_resolved} exceeds the model's max_position_embeddings "
            f"{shape.max_position_embeddings}; fix: pass --seq-len {shape.max_position_embeddings} or less"
        )
    check_logits_fit(run, shape.vocab_size)


def embedded_config(run: ScenarioRun) -> dict:
    """The config.json fields of the run's embedded tiny model (titanflow.assets.TinySpec.config_fields), known
    without building it: preflight checks a run against them in milliseconds, and the flow's pull_weights builds the
    model (seconds on a fresh clone), whose folder render_config checks whole."""
    from titanflow.assets import TINY_SPECS

    return TINY_SPECS[SCENARIOS[run.scenario].model_type].config_fields()


#: The shortest sequence a run may ask for (ScenarioRun.seq_len's bound).
SHORTEST_SEQ_LEN = next(m.ge for m in ScenarioRun.model_fields["seq_len"].metadata if hasattr(m, "ge"))

#: Bytes of one logit: torchtitan's loss computes the output layer's logits in float32 whatever the training dtype
#: (torchtitan 0.3.0 ``cross_entropy_loss`` upcasts them; the cpu target trains in float32 throughout).
LOGIT_BYTES = 4
#: Tensors of a loss chunk's logits' size alive at once, at the least: the logits and log_softmax's output, which
#: cross entropy computes from them (a third, their gradient, comes in the backward).
LOGIT_COPIES = 2


def rank_memory(run: ScenarioRun) -> tuple[int, str] | None:
    """(bytes one rank can hold, where that figure comes from), or None where it is not checked: the target's own
    (``Target.rank_memory_bytes``: trn2's HBM a logical core), else on the CPU of a local launch this machine's memory
    (psutil) over the node's ranks; a GPU's memory, or a CPU node that Slurm or Kubernetes picks, is not known here."""
    spec = run.target_spec
    if spec.rank_memory_bytes is not None:
        return spec.rank_memory_bytes, f"{spec.rank_memory_bytes / 2**30:.0f} GiB of device memory a {spec.node} rank"
    if spec.device != "cpu" or run.scheduler_resolved != "local":
        return None
    import psutil

    total, ranks = psutil.virtual_memory().total, run.nproc_per_node_resolved
    return total // ranks, f"this machine's {total / 2**30:.1f} GiB of memory over its {ranks} rank(s)"


def check_logits_fit(run: ScenarioRun, vocab_size: int) -> None:
    """A rank's share of the batch can be held at all: :data:`LOGIT_COPIES` float32 tensors of one loss chunk's logits
    (``local batch x seq_len / the scenario's loss chunks`` tokens x ``vocab_size`` x :data:`LOGIT_BYTES`; torchtitan's
    ``ChunkedLossWrapper`` runs the output layer and the loss one chunk at a time) fit the rank's memory
    (:func:`rank_memory`). Every training step holds them at once, so a run beyond this is certain to fail (or, on a
    CPU, to swap for hours): a lower bound of a step's memory, never a refusal of a run that would fit; the weights,
    the optimizer and the activations come on top. Example: the cpu golden run (2 ranks, global batch 4 x 256
    tokens, 8 chunks) needs 78 MB a rank; trn2's (64 ranks, batch 1 x 4096, 8 chunks) 622 MB of a rank's 24 GiB,
    so its global batch may reach 41 x 64 = 2624.

    Raises:
        ValueError: ``global_batch_size: ...`` with the largest that fits; ``seq_len: ...`` when not even one
            sequence a rank fits; ``weights: ...`` when not even the shortest sequence does (the vocabulary).
    """
    memory = rank_memory(run)
    if memory is None:
        return
    limit, where = memory
    chunks = SCENARIOS[run.scenario].loss_chunks or 1
    token_bytes = vocab_size * LOGIT_BYTES * LOGIT_COPIES  # one token's logits and their log-softmax
    sequence_bytes = run.seq_len_resolved // chunks * token_bytes  # one sequence's part of a chunk
    local = run.global_batch_size_resolved // run.world_size
    if local * sequence_bytes <= limit:
        return
    in_chunks = f" in each of the loss's {chunks} chunks" if chunks > 1 else ""
    need = (f"{local} sequence(s) of {run.seq_len_resolved} tokens a rank ({run.world_size} rank(s)) need "
            f"{local * sequence_bytes / 2**30:,.1f} GiB for the float32 logits over the {vocab_size}-token vocabulary "
            f"and their log-softmax{in_chunks}, beyond {where}")
    most = limit // sequence_bytes * run.world_size
    if most >= run.world_size:
        raise ValueError(f"global_batch_size: {run.global_batch_size_resolved}: {need}; fix: pass --global-batch-size "
                         f"{most} or less (a multiple of the world size {run.world_size}), or a shorter --seq-len")
    longest = limit // token_bytes * chunks  # a multiple of the chunks
    if longest < SHORTEST_SEQ_LEN:
        raise ValueError(f"weights: vocab_size {vocab_size} of the model's config.json needs "
                         f"{token_bytes / 2**30:,.1f} GiB a token for its float32 logits "
                         f"and their log-softmax: not even {SHORTEST_SEQ_LEN} tokens a "
                         f"rank fit {where}; fix: pass weights whose vocabulary fits, or a target with more memory a rank")
    raise ValueError(f"seq_len: {run.seq_len_resolved}: {need}; fix: pass --seq-len {longest} or less")


def _read_largest_token_id(tokenizer_json: Path) -> int:
    """The largest id of a tokenizer.json: its model's vocabulary and its added tokens, read by the ``tokenizers``
    library, which knows every model type's layout (about 0.6 s for Qwen3's 11 MB)."""
    from tokenizers import Tokenizer

    return max(Tokenizer.from_file(str(tokenizer_json)).get_vocab(with_added_tokens=True).values())


def _largest_token_id(tokenizer_json: Path) -> int:
    """:func:`_read_largest_token_id`, kept in the titanflow cache under the file's content hash (about 0.03 s to hash
    Qwen3's tokenizer.json), so a run pays the read once per tokenizer, not once per process; read directly when the
    cache cannot be written."""
    from titanflow import paths
    from titanflow.assets.cache import build_once, sha256_file

    found = paths.cache_root() / "tokenizer-ids" / sha256_file(tokenizer_json)[:16]
    try:
        build_once(found, lambda out: (Path(out) / "largest_id").write_text(str(_read_largest_token_id(tokenizer_json))))
        return int((found / "largest_id").read_text())
    except OSError:  # a read-only cache: the answer is the same, only slower
        return _read_largest_token_id(tokenizer_json)


def check_tokenizer_fits(folder: Path, vocab_size: int) -> None:
    """Every id ``folder/tokenizer.json`` can produce has a row in the model's embedding: its largest id is below
    config.json's ``vocab_size``. A model may have more rows than the tokenizer has ids (Qwen3: 151,669 ids,
    151,936 rows, padded for sharding), never fewer: a token past the last row fails the first forward pass on every
    rank (``IndexError: index out of range in self``), after the launch and the model's build.

    Raises:
        ValueError: naming ``weights``, the two sizes and the fix.
    """
    largest = _largest_token_id(folder / "tokenizer.json")
    if largest >= vocab_size:
        raise ValueError(f"weights: {folder / 'config.json'} has vocab_size {vocab_size}, but its tokenizer.json has "
                         f"ids up to {largest}, which would index past the embedding's last row; fix: give a folder "
                         f"whose config.json vocab_size is at least {largest + 1} (the model's own tokenizer and "
                         "config)")


def check_pretrained_weights_given(run: ScenarioRun) -> None:
    """Pretrained init off cpu names its weights: without them a run (or a render) would pretrain the embedded
    tiny model's checkpoint on this machine's CPU (titanflow.weights.pretrained: compute) and train a model that
    is no model of the target.

    Raises:
        ValueError: naming ``weights`` and, where the target's deployments have them, the weights to pass.
    """
    if run.init != "pretrained" or run.weights is not None or run.target_spec.device == "cpu":
        return
    from titanflow.prefect_ops.deployments import TARGET_WEIGHTS

    usual = TARGET_WEIGHTS.get(run.target, {}).get(run.scenario, {}).get("weights")
    raise ValueError(f"weights: none given for init pretrained on {run.target}; the embedded tiny model's pretrained "
                     "checkpoint would be pretrained on this machine's CPU first and is no model of the target; fix: pass "
                     "--weights a Hugging Face folder or Hub id" + (f" (the {run.target} deployments': --weights "
                                                                     f"{usual})" if usual else ""))


def trim_source_config(run: ScenarioRun) -> dict | None:
    """The config.json contents the run's ``trim`` cuts, when they are on this machine without downloading or
    building anything: the embedded tiny MoE's (:func:`embedded_config`, also the config of its pretrained
    checkpoint), a local folder's, or a Hub id's copy (titanflow.weights.resolve.local_copy); None otherwise (checked
    by the flow's trim step)."""
    if run.weights is None:
        return embedded_config(run)
    from titanflow.weights.resolve import local_copy

    folder = local_copy(run.weights)
    return read_config(folder) if folder is not None else None


def check_trim_fits(run: ScenarioRun) -> None:
    """``trim`` only removes from the model it is given: at most its layers, experts and experts per token
    (titanflow.weights.trim.check_trim against :func:`trim_source_config`).

    Raises:
        ValueError: ``trim: layers 5 > 4 (the checkpoint's) ...``, naming what to pass at most.
    """
    if run.trim is None:
        return
    config = trim_source_config(run)
    if config is None:
        return
    from titanflow.weights.trim import check_trim

    check_trim(config, run.trim)


def check_this_machine(run: ScenarioRun) -> None:
    """This machine can run the target's ranks: on trn2 every check of titanflow doctor, on cuda its GPUs, else the
    target's runtime (titan_cfg.targets.Target.missing_runtime).

    Raises:
        ValueError: ``target: ...`` with what is missing and the fix.
    """
    if run.target == "trn2":  # every missing piece of the node at once: titanflow doctor's checks
        from titanflow.run.doctor import require_ready

        require_ready(run)
    if run.target_spec.device == "cuda":  # GPUs for the run's own ranks
        from titanflow.run.doctor import check_cuda

        gpus = check_cuda(run)
        if not gpus.ok:
            raise ValueError(f"target: {run.target} cannot run on this machine: {gpus.detail}; fix: {gpus.fix} "
                             f"(`titanflow render {run.scenario} --target {run.target}` writes its job files)")
    else:
        missing = run.target_spec.missing_runtime()
        if missing:
            raise ValueError(f"target: {run.target} cannot run on this machine: {missing}; fix: "
                             f"run it where it can; `titanflow render {run.scenario} --target {run.target}` writes its job files")


def check_pod_zero(nnodes: int) -> None:
    """A run on Kubernetes trains from pod 0 of a titanflow Kubernetes job (titanflow.kubernetes.pod), whose pod
    count is the run's ``nnodes``.

    Raises:
        ValueError: ``scheduler: ...`` when this process is not pod 0 of one, ``nnodes: ...`` when the job has
            another number of pods, each with the fix.
    """
    from titanflow.kubernetes import pods

    try:
        pods.group()
        index = pods.index()
    except pods.PodError as err:
        raise ValueError(f"scheduler: kubernetes trains from pod 0 of a titanflow Kubernetes job, and {err}; fix: run "
                         "it through the trn2-eks work pool (deployments/prefect.yaml), or pass --scheduler slurm") from None
    if index != 0:
        raise ValueError(f"scheduler: this is pod {index} of the Kubernetes job, which runs a torchrun agent; the flow "
                         "runs in pod 0 (titanflow.kubernetes.pod)")
    pods_count = os.environ.get(pods.POD_COUNT_ENV, "").strip()  # "2 " (titanflow.kubernetes.template)
    if pods_count and pods_count != str(nnodes):
        raise ValueError(f"nnodes: the run asks for {nnodes} nodes but its Kubernetes job has {pods_count} pods; fix: "
                         f"give the flow run the job variable nnodes={nnodes} (prefect deployment run ... --job-variable "
                         f"nnodes={nnodes}), or --nnodes {pods_count}")


def preflight(run: ScenarioRun, *, launch: bool = True) -> Path:
    """Check everything checkable without compute; return the (not yet created) run folder, or for
    ``run.resume`` the resumed run's folder, which must exist (titanflow.run.resume checks the rest).

    ``launch=False`` (rendering only) skips the check that this machine can run the target; a run on Slurm
    (``run.scheduler_resolved``) is checked by Slurm instead (``sbatch --test-only``: titanflow.slurm.job.check_submission).

    Raises:
        ValueError: the message starts with the field to change.
    """
    check_pretrained_weights_given(run)
    if launch and run.scheduler_resolved == "kubernetes":
        check_pod_zero(run.nnodes_resolved)
    elif launch and run.scheduler_resolved == "slurm":  # its nodes run it, not this machine: Slurm says now whether it would
        from titanflow.slurm.job import check_submission

        check_submission(run.nnodes_resolved, run.timeout_s)
    elif launch:
        check_this_machine(run)
    root = run.runs_root()
    check_runs_dir_writable(root)
    run_dir = root / (run.resume or run.run_id or new_run_id(run))
    if run.resume is not None and not run_dir.is_dir():
        raise ValueError(f"resume: no run folder {run_dir}; fix: pass the id of a run under {root} (--runs-dir names "
                         "another parent)")
    if run_dir.exists() and run.resume is None:
        raise ValueError(f"run_id: {run_dir} already exists; fix: pass another run id, or none for a fresh one "
                         f"(--resume {run_dir.name} continues it)")
    if run.weights is None:  # the embedded tiny model (random or its pretrained checkpoint), checked before it is built
        check_shape_fits(run, config_shape(embedded_config(run), SCENARIOS[run.scenario].model_type))
    elif not is_hub_id(run.weights):
        check_weights_folder(run, Path(run.weights).expanduser().resolve(), complete=launch)
    else:  # render_config checks the folder whole once pull_weights has it
        check_hub_weights(run)
    check_trim_fits(run)
    return run_dir
