"""Which runs compare with which: the workload key of a run's parameters, and the warm-up it trained with.

Runs compare (the golden_curve rule, the history medians, ``titanflow compare``'s baseline) only with runs of the
same scenario, target, init and :func:`config_key`. A run shorter than its golden but otherwise of the golden's
workload is compared over the leading steps both schedules share (titanflow.judge.goldens,
titan_cfg.lr_schedule), which needs the warm-up each trained with (:func:`warmup_steps_of`).
"""

from __future__ import annotations

import hashlib
import json

from titanflow.params import ScenarioRun, resolved_warmup_steps

#: Parameters (ScenarioRun fields) that define the workload: runs compare (golden curve, history
#: medians) only with runs of the same scenario, target, init and these. The numerics knobs (lr,
#: warmup_steps, seed) are left out on purpose: a changed learning rate is what the loss-curve rule
#: must catch, not a reason to skip it; run_id, runs_dir, timeout_s, tolerances and export_dtype
#: change neither the curve nor the speed of training. ``nproc`` stands for the world size the run asked
#: for (:func:`world_size_asked`): how the ranks are spread over nodes does not change the curve (2 nodes x 1
#: rank and 1 node x 2 ranks give the same losses, tests/e2e/test_slurm_runs.py).
CONFIG_KEY_FIELDS = ("weights", "steps", "global_batch_size", "seq_len", "nproc", "compile")


def _own_run(parameters: dict) -> ScenarioRun | None:
    """The run of ``parameters``' scenario, target and mode with nothing else asked (what the target and mode
    resolve to by themselves), or None for a scenario, target or mode this version does not know."""
    try:
        return ScenarioRun(scenario=parameters.get("scenario") or "native", target=parameters.get("target") or "cpu",
                           model_spec=parameters.get("model_spec") or "config")
    except ValueError:
        return None


def world_size_asked(parameters: dict) -> int | None:
    """The world size ``parameters`` ask for, None when it is the target's own (nothing asked, or nodes and ranks
    per node that multiply to the target's world size): ``nnodes`` x ``nproc_per_node``, each the target's where
    not given; ``nproc`` of summaries written before runs had nodes is the ranks of one node."""
    nnodes, per_node = parameters.get("nnodes"), parameters.get("nproc_per_node", parameters.get("nproc"))
    if nnodes is None and per_node is None:
        return None
    own = _own_run(parameters)  # the target's own nodes and ranks, within the scenario's rank limit there
    if own is None:  # a scenario or target this version does not know: the numbers as asked
        return (nnodes or 1) * (per_node or 1)
    asked = (nnodes or own.nnodes_resolved) * (per_node or own.nproc_per_node_resolved)
    return None if asked == own.world_size else asked


def attention_asked(parameters: dict) -> str | None:
    """The attention implementation ``parameters`` ask for (their ``kernels``) where it is not the one the run's
    target and mode would take anyway, else None. Attention decides what a token sees (the document mask, or the
    packed row as one sequence: titan_cfg.kernels.attention), so it is part of the workload, not a numerics knob;
    a rope implementation is not (every one computes the same rotation)."""
    chosen = parameters.get("kernels")
    asked = chosen.get("attention") if isinstance(chosen, dict) else None
    if asked is None:
        return None
    own = _own_run(parameters)  # None: a scenario, target or mode this version does not know: the choice as asked
    return None if own is not None and asked == own.kernels_resolved["attention"] else asked


def config_key(parameters: dict) -> str:
    """12 hex digits of sha256 over the :data:`CONFIG_KEY_FIELDS` of ``parameters`` (absent = None), ``nproc`` being
    :func:`world_size_asked`; ``model_spec`` where it is not the default "config" (the walkthrough mode is another
    workload: its attention, warm-up and balancing give another curve) and ``attention`` where the run asks for
    another than its mode's (:func:`attention_asked`). The keys of runs that ask for neither stay what they were
    before runs had either."""
    chosen = {name: parameters.get(name) for name in CONFIG_KEY_FIELDS} | {"nproc": world_size_asked(parameters)}
    if (parameters.get("model_spec") or "config") != "config":
        chosen["model_spec"] = parameters["model_spec"]
    if (attention := attention_asked(parameters)) is not None:
        chosen["attention"] = attention
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]


def warmup_steps_of(parameters: dict) -> int:
    """The warm-up steps a run of ``parameters`` (a ScenarioRun's fields, as a summary or history row keeps them)
    trained with: ``warmup_steps`` as given, else the default for its ``steps`` (titanflow.params)."""
    return resolved_warmup_steps(parameters["steps"], parameters.get("warmup_steps"),
                                 parameters.get("scenario") or "native", parameters.get("model_spec") or "config")
