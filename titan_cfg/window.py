"""The torchtitan window: the upstream changes titanflow's rank side meets between the earliest base the Neuron fork
can sit on and torchtitan 0.3.0, how to tell which of them the installed torchtitan has, and what titanflow does on
a base without each (:data:`CHANGES`).

The trn2 profile's torchtitan is torchtitan-neuron release-2.33 ("0.2.2+neuron.1"): a main snapshot of upstream
between 2026-02-23 (the walkthrough's config functions, #2386) and the 0.3.0 release (2026-09), plus Neuron's
patches, whose source is not readable from here. So titanflow does not assume one torchtitan: each change below is
either *adapted* (titanflow takes whichever form the install offers: :mod:`titan_cfg.forms`) or *needed* by the
scenarios it names, which a base without it cannot serve; :func:`refusals` says so before a launch, naming the API
and the upstream date that brought it (an environment failure, never bad input).

Checked against upstream snapshots at 2026-02-23, 06-09, 07-20 and 08-21 and the 0.3.0 release
(:data:`CHECKED_ON`; ``make test-upstream`` installs each beside the cpu venv: tests/upstream/). Dates and pull requests
are upstream's first-parent history (pytorch/torchtitan).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from titan_cfg import upstream

#: The points of the window the changes' detection and titanflow's forms were checked on: upstream main at these
#: commits (``git archive`` of pytorch/torchtitan) and the PyPI release.
CHECKED_ON = {
    "2026-02-23": "9810191bb", "2026-06-09": "a9c5edc74", "2026-07-20": "af35cfb15", "2026-08-21": "b5bcd76c6",
    "0.3.0": "PyPI release (2026-09)",
}

EVERY = ("*",)  # ``needed_by`` of a change every scenario needs
DECODER = ("native", "moe")  # torchtitan's own Qwen3 decoder, built by titan_cfg.model_spec


#: Module -> the names the probes of :data:`CHANGES` look for (filled by :func:`_has`): with titan_cfg.upstream's
#: tables, what a stand-in of a torchtitan that has every change holds (tests/helpers/stand_ins.generated_fork).
PROBED: dict[str, tuple[str, ...]] = {}


def _has(*dotted: str) -> Callable[[], bool]:
    """A probe: every ``module:name`` of ``dotted`` resolves in this install (titan_cfg.upstream.resolve)."""
    for entry in dotted:
        module, _, name = entry.partition(":")
        PROBED[module] = tuple(dict.fromkeys((*PROBED.get(module, ()), name)))

    def probe() -> bool:
        for entry in dotted:
            module, _, name = entry.partition(":")
            try:
                upstream.resolve(module, name or None)
            except upstream.Missing:
                return False
        return True

    return probe


def _lacks(*dotted: str) -> Callable[[], bool]:
    """A probe of a removal: some ``module:name`` of ``dotted`` no longer resolves."""
    has = _has(*dotted)
    return lambda: not has()


def _token_batching() -> bool:
    """The trainer's training config no longer has ``local_batch_size`` (#4121 counts the batch in tokens)."""
    trainer_config = upstream.resolve("torchtitan.trainer", "Trainer.Config")
    (training,) = [f for f in dataclasses.fields(trainer_config) if f.name == "training"]
    return not hasattr(training.default_factory(), "local_batch_size")


def _sdpa_refused() -> bool:
    """``model_registry("4B", attn_backend="sdpa")`` raises (upstream #3571), as it does from 2026-06-09 on."""
    try:
        model_registry = upstream.resolve("torchtitan.models.qwen3", "model_registry")
    except upstream.Missing:
        return False  # no registry to ask: the config-function change reports it
    try:
        model_registry("4B", attn_backend="sdpa")
    except ValueError:
        return True
    except TypeError:  # a registry before the attn_backend keyword (before 2026-02-23's): not refused by this change
        return False
    return False


def _parses_current_argv() -> bool:
    """``ConfigManager.parse_args`` has no import-time default for its arguments (it reads ``sys.argv`` when called)."""
    try:
        parse_args = upstream.resolve("torchtitan.config.manager", "ConfigManager.parse_args")
    except upstream.Missing:
        return True  # no such parser to adapt: the names check reports it
    return not any(isinstance(default, list) for default in parse_args.__defaults__ or ())


def _returns_triple() -> bool:
    """``Trainer.post_dataloading_process`` is annotated to return a tuple of three (from #3371), not four."""
    try:
        method = upstream.resolve("torchtitan.trainer", "Trainer.post_dataloading_process")
    except upstream.Missing:
        return True  # nothing to adapt: the names check reports it
    returned = method.__annotations__.get("return")
    tree = ast.parse(returned if isinstance(returned, str) else repr(returned), mode="eval").body
    items = tree.slice.elts if isinstance(tree, ast.Subscript) and isinstance(tree.slice, ast.Tuple) else ()
    return len(items) != 4


@dataclass(frozen=True)
class Change:
    """One upstream change titanflow's rank side meets.

    ``key``: its name here; ``date``: the upstream date it landed (first parent, ``YYYY-MM-DD``); ``pr``: its pull
    request; ``what``: the API in words; ``probe``: True when this install has the change (for a removal: the old
    API is gone); ``needed_by``: the scenarios (``*``: every one) that cannot run on a base without it (empty:
    titanflow adapts, and ``adapted`` says how); ``removal``: the change takes an API away, so the scenarios of
    ``needed_by`` cannot run on a base *with* it.
    """

    key: str
    date: str
    pr: str
    what: str
    probe: Callable[[], bool]
    needed_by: tuple[str, ...] = ()
    adapted: str = ""
    removal: bool = False

    def blocks(self, scenario: str, present: bool) -> bool:
        """Whether a base where this change is ``present`` (or not) cannot serve ``scenario``."""
        return bool({scenario, "*"} & set(self.needed_by)) and present == self.removal

    def refusal(self) -> str:
        """The one line a blocked scenario is refused with: the API and the date."""
        if self.removal:
            return f"gone: {self.what} (removed upstream on {self.date}, {self.pr}); titanflow needs a base before it"
        return f"missing: {self.what} (upstream from {self.date}, {self.pr}); titanflow needs a base from then on"


#: The changes in upstream's order. The rank side takes each adapted one's form through titan_cfg.forms.
CHANGES: tuple[Change, ...] = (
    Change("config_functions", "2026-02-23", "#2386", "the Python config functions (qwen3_32b(), "
           "transformers_modeling_backend_full())", _has("torchtitan.models.qwen3.config_registry:qwen3_32b"), EVERY),
    Change("qwen3_builders", "2026-04-03", "4b3347467", "torchtitan's Qwen3 layer builders (_build_qwen3_layers, "
           "_build_qwen3_moe_layers, _qwen3_norm, _EMBEDDING_INIT, _LINEAR_INIT)",
           _has(*(f"torchtitan.models.qwen3:{n}" for n in ("_build_qwen3_layers", "_build_qwen3_moe_layers",
                                                          "_qwen3_norm", "_EMBEDDING_INIT", "_LINEAR_INIT"))),
           DECODER),
    Change("default_adamw", "2026-06-04", "#3269", "the optimizer config function default_adamw",
           _has("torchtitan.components.optimizer:default_adamw"), EVERY),
    Change("per_layer_rope", "2026-06-05", "02d24f017", "per-layer RoPE (CosSinRoPE in torchtitan.models.common), "
           "where the rope kernel is swapped in", _has("torchtitan.models.common.rope:CosSinRoPE"), DECODER),
    Change("qwen3_30b_a3b", "2026-06-05", "06d4a35e2", "the MoE config function qwen3_30b_a3b()",
           _has("torchtitan.models.qwen3.config_registry:qwen3_30b_a3b"), ("moe",)),
    Change("sdpa_refused", "2026-06-09", "#3571", "model_registry(..., attn_backend=\"sdpa\") refused for language "
           "models", _sdpa_refused, adapted="the walkthrough's 4B flavor is built with the default backend; the "
           "attention that runs is titanflow's packed row either way", removal=True),
    Change("post_dataloading_triple", "2026-06-10", "#3371", "Trainer.post_dataloading_process returning (inputs, "
           "labels, extra)", _returns_triple, adapted="before it the four-tuple's extra inputs and keywords are "
           "merged (titan_cfg.forms.model_inputs)"),
    Change("ac_policies", "2026-06-15", "#3674", "activation checkpointing as policy classes (FullAC, SelectiveAC)",
           _has("torchtitan.distributed.activation_checkpoint:FullAC"),
           adapted="before it, ActivationCheckpointConfig(mode=\"full\" | \"selective\")"),
    Change("config_argv", "2026-06-20", "#3725", "the config parser reading the command line when called",
           _parses_current_argv, adapted="before it a rank sets the parser's default to its own command line "
           "(it holds the command line of the process that imported torchtitan: a forked rank's launcher)"),
    Change("chunked_loss_wrapper", "2026-06-26", "#3779", "the chunked loss wrapper (ChunkedLossWrapper, "
           "loss.loss_fn.global_vocab_size)", _has("torchtitan.components.loss:ChunkedLossWrapper"),
           adapted="before it, the plain ChunkedCELoss, which needs no vocabulary size"),
    Change("backend_attention", "2026-07-20", "#2679", "the transformers backend's importable model with "
           "create_attention_mask and flex_attention_forward",
           _has("torchtitan.experiments.transformers_modeling_backend.model:HFTransformerModel",
                "torchtitan.experiments.transformers_modeling_backend:model.create_attention_mask",
                "torchtitan.experiments.transformers_modeling_backend:model.flex_attention_forward"), ("hf_backend",)),
    Change("partial_dtensor", "2026-08-18", "#4085", "parallelism.spmd_backend \"partial_dtensor\" (the name of "
           "DTensor on model-parallel axes only)", lambda: "partial_dtensor" in _spmd_backends(),
           adapted="before it the same backend is called \"default\""),
    Change("grain", "2026-08-19", "#4088", "torchtitan's text data loader HuggingFaceTextDataLoader (Grain data "
           "loading replaces it)", _lacks("torchtitan.hf_datasets.text_datasets:HuggingFaceTextDataLoader"),
           adapted="the local dataset through GrainDataLoader in file order, concatenated and split into rows of "
           "seq_len as the text loader did, each row's positions restarting at 0 (titan_cfg.grain_loader)",
           removal=True),
    Change("token_batching", "2026-08-20", "#4121", "training.local_batch_size and training.seq_len (the batch "
           "is counted in tokens from then on, and the model takes a microbatch as one token row)", _token_batching,
           adapted="num_tokens_per_microbatch_per_dp_rank = local_batch_size * seq_len, num_tokens_per_train_step = "
           "global_batch_size * seq_len, max_context_length = seq_len; the token row is cut back into rows of "
           "seq_len, kept apart by their positions and titanflow's attention (titan_cfg.token_rows)", removal=True),
)


def _spmd_backends() -> tuple[str, ...]:
    """The values ``parallelism.spmd_backend`` takes in this install (its Literal annotation; () when it has none)."""
    try:
        parallelism = upstream.resolve("torchtitan.config", "ParallelismConfig")
    except upstream.Missing:
        return ()
    hint = typing.get_type_hints(parallelism).get("spmd_backend")
    return typing.get_args(hint) if hint is not None else ()


class WindowError(RuntimeError):
    """The installed torchtitan cannot serve a scenario (:func:`require`): an environment failure, not bad input."""


def require(scenario: str) -> None:
    """Refuse ``scenario`` before anything is built when this install cannot serve it (:func:`refusals`).

    Raises:
        WindowError: ``torchtitan cannot serve the <scenario> scenario: <each refusal>; fix: ...``.
    """
    lines = refusals(scenario)
    if lines:
        raise WindowError(f"this torchtitan cannot serve the {scenario} scenario: " + "; ".join(lines) + "; fix: "
                          "install the torchtitan of the target's profile (titanflow doctor names it and where this "
                          "one sits in the window: titan_cfg/window.py)")


def change(key: str) -> Change:
    """The change of :data:`CHANGES` called ``key``.

    Raises:
        KeyError: no change has that key.
    """
    return {c.key: c for c in CHANGES}[key]


def _probed(change: Change) -> bool:
    """``change.probe()``; False where the probe itself fails on what it finds (an object of another shape than any
    torchtitan's: a stand-in), so the rest of the window is still read."""
    try:
        return change.probe()
    except (AttributeError, TypeError):
        return False


def present() -> dict[str, bool]:
    """``{change key: whether this install has it}`` for every change of :data:`CHANGES` (imports torchtitan)."""
    return {change.key: _probed(change) for change in CHANGES}


def refusals(scenario: str, found: dict[str, bool] | None = None) -> list[str]:
    """Why this install (or one with the changes ``found``: :func:`present`'s answer) cannot serve ``scenario``: one
    line per blocking change (:meth:`Change.refusal`), [] when it can."""
    found = present() if found is None else found
    return [c.refusal() for c in CHANGES if c.blocks(scenario, found[c.key])]


def adapted_to(found: dict[str, bool]) -> list[str]:
    """The adapted changes for which an install with the changes ``found`` makes titanflow take another form than
    0.3.0's: ``without <key> (<date>, <pr>)`` for one it lacks (the older form taken), ``with <key> ...`` for a removal
    it has (what titanflow does then: :attr:`Change.adapted`, docs/trn2-walkthrough.md)."""
    return [f"{'with' if c.removal else 'without'} {c.key} ({c.date}, {c.pr})" for c in CHANGES
            if c.adapted and found[c.key] == c.removal]


def position(found: dict[str, bool]) -> str:
    """Where an install with the changes ``found`` sits in the window, in words: the last change it has and the first
    it lacks, in upstream's order (a fork may carry a later change on an earlier base: then both are named)."""
    has = [c for c in CHANGES if found[c.key]]
    lacks = [c for c in CHANGES if not found[c.key]]
    last = f"{has[-1].date} (has {has[-1].key})" if has else "before the window (has none of its changes)"
    if not lacks:
        return f"resembles upstream from {last} on (it has every change of the window)"
    first = f"{lacks[0].date} (lacks {lacks[0].key})"
    order = "" if not has or has[-1].date <= lacks[0].date else "; out of upstream's order (a patched base)"
    return f"resembles upstream between {last} and {first}{order}"


def report(target_node: str, device: str, scenarios: tuple[str, ...]) -> dict:
    """What titanflow doctor's upstream check prints, found in this Python after the target's compatibility layers
    and the triton-free import (as a rank of ``target_node``, a node type, finds torchtitan), for each of
    ``scenarios``: ``{"present": present(), "position": position(...), "scenarios": {name: {"missing": {what
    failed first: why} for each name of titan_cfg.upstream the scenario needs on ``device`` that this install lacks,
    "wanted": how many names it needs, "refusals": refusals(name)}}}``. Imports torchtitan: run it in a Python of its
    own."""
    from titan_cfg import compat  # lazy: torch

    compat.apply(target_node)
    compat.cpu.make_importable_without_triton()  # compat imports its cpu layer
    found = present()
    rows = {}
    for name in scenarios:
        names = upstream.names_for(device, name)
        rows[name] = {"missing": upstream.missing(device, names), "wanted": len(names),
                      "refusals": refusals(name, found)}
    return {"present": found, "position": position(found), "adapted_to": adapted_to(found), "scenarios": rows}


def torchtitan_providers() -> dict[str, str]:
    """``{distribution name: version}`` of every installed distribution that provides the ``torchtitan`` package
    (importlib.metadata's ``packages_distributions``: upstream's ``torchtitan``, the fork under its own name, a copy an
    overlay shadows); titanflow doctor picks the one ``import torchtitan`` finds among them."""
    names = importlib.metadata.packages_distributions().get("torchtitan", [])
    return {name: importlib.metadata.version(name) for name in dict.fromkeys(names)}


#: The file, in a run's train folder, where rank 0 records the torchtitan it trained with (:func:`record_install`).
INSTALL_FILE = "torchtitan_install.json"


def record_install(path: Path, seed: int | None, weights_dir: Path, sdpa: dict | None = None) -> str:
    """Write ``path`` (JSON): the distribution that provides ``torchtitan`` (name, version, where), where it sits in
    the window, the changes it has (:func:`present`), the forms titanflow adapts to, the run's ``seed`` and its
    weights (the folder, whether it is a trim titanflow made, ``<cache>/trimmed/``, and how many safetensors files
    it holds: none for a config-only model); ``sdpa``: which kernel torch's scaled_dot_product_attention took on the
    rank's device (titan_cfg.sdpa_kernel.probe); the step-1 batch (whether the install's data loader yields
    per-document positions, and the document mask titanflow trains with) is titan_cfg.first_batch's. Returns the one
    line a log gets. On a node's first run these settle what cannot be read here (docs/trn2-walkthrough.md, "The
    torchtitan window")."""
    where = Path(importlib.util.find_spec("torchtitan").origin).parent
    found = present()
    installed = {"distributions": torchtitan_providers(),
                 "where": str(where), "position": position(found), "present": found,
                 "adapted_to": adapted_to(found), "seed": seed,
                 "weights": {"dir": str(weights_dir), "trimmed_by_titanflow": weights_dir.parent.name == "trimmed",
                             "safetensors_files": len(list(weights_dir.glob("*.safetensors")))},
                 "sdpa": sdpa}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(installed, indent=1) + "\n")
    dists = ", ".join(f"{n} {v}" for n, v in installed["distributions"].items()) or "no distribution"
    return f"torchtitan at {where} ({dists}) {installed['position']}; recorded in {path.name}"
