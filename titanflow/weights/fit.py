"""Whether weights fit the run, read without building or training anything: the model's config.json against the
run's sequences and memory, the folder's tokenizer, index and shards, and a Hub id's copy on this machine (a trim
against the checkpoint it cuts: titanflow.run.model_config). Each failure is a :class:`ValueError` whose message
starts with the field to change (``weights``, ``seq_len``, ``global_batch_size``).
"""

from __future__ import annotations

from pathlib import Path

from titan_cfg.model_spec import Qwen3Shape, qwen3_shape
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.trainer_config import check_pretrained_source
from titanflow import paths
from titanflow.build_cache import build_once, sha256_file
from titanflow.params import ScenarioRun
from titanflow.weights.check import check_checkpoint, check_save_index
from titanflow.weights.resolve import download_command, local_copy


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
    check_save_index(folder)  # the export is sharded by this index, whatever the init
    if run.init == "pretrained":
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
