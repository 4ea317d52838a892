"""``titanflow doctor --target trn2|cpu|cuda``: is this machine ready to run a target, in seconds, before anything runs.

    titanflow doctor --target cpu
    titanflow doctor --target trn2 --scenario hf_backend --init pretrained --weights Qwen/Qwen3-4B-Instruct-2507

One line per check, each failed one with its fix; exit 0 only when all pass. The checks, by target, are
titanflow.run.checks's (its module docstring has the table).
"""

from __future__ import annotations

import sys

from pydantic import ValidationError

from titan_cfg.scenarios import on_node
from titan_cfg.targets import TARGETS, node_of
from titanflow.params import ScenarioRun
from titanflow.refusal import describe
from titanflow.run.checks import default_weights, run_checks


def doctor(target: str, scenario: str = "native", init: str = "random", weights: str | None = None,
           nproc: int | str | None = None, runs_dir: str | None = None) -> int:
    """Print every check for ``target`` and a summary line; 0 when all pass, 1 otherwise, 2 on bad input
    (``nproc`` as typed is validated by ScenarioRun, its errors printed by titanflow.refusal.describe).

    The run checked is ``scenario``'s: without ``weights``, the weights its deployments on the target train
    (titanflow.run.checks.default_weights, on trn2 moe's Qwen3-30B-A3B, the others' Qwen3-4B-Instruct-2507) with their trim
    (titan_cfg.scenarios.ON_NODE), so a node is checked for the runs it is to make (profiles/trn2/setup.sh
    ``--scenario``, which each trn2 deployment's pull step passes)."""
    if target not in TARGETS:
        print(f"titanflow: bad input:\ntarget: unknown {target!r}; fix: pass one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    usual = on_node(scenario, node_of(target))  # the deployments' run of the scenario: its weights and their trim
    try:  # the weights are checked as a line of their own, not as input
        run = ScenarioRun(scenario=scenario, target=target, init=init, nproc=nproc, runs_dir=runs_dir,
                          trim=usual.trim if weights is None else None)
    except ValidationError as err:  # field, what is wrong, the fix: as titanflow run prints it
        print(f"titanflow: bad input:\n{describe(err)}", file=sys.stderr)
        return 2
    checks = run_checks(run, weights or default_weights(target, scenario))
    for check in checks:
        print(check.line())
    failed = sum(not check.ok for check in checks)
    print(f"doctor {target}: {len(checks)} checks, {failed} failed" + ("" if failed else ": ready"))
    return 1 if failed else 0
