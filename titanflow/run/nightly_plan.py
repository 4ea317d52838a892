"""The nightly suite planned: which (scenario, init) runs it makes on a target, each validated as a
:class:`titanflow.params.ScenarioRun` before the first starts (the qwen3-nightly flow, ``titanflow nightly``).
"""

from __future__ import annotations

from titan_cfg.scenarios import SCENARIOS, on_node
from titan_cfg.targets import node_of
from titanflow.pairs import given_twice
from titanflow.params import INITS, ScenarioRun


def nightly_suite(scenarios: list[str] | None = None, inits: list[str] | None = None) -> list[tuple[str, str]]:
    """(scenario, init) pairs of a nightly suite, in order; default every scenario x both inits.

    Raises:
        ValueError: an unknown scenario or init (names the known ones), or one given twice (its runs would be
            the same pair run twice).
    """
    unknown = sorted(set(scenarios or []) - set(SCENARIOS)) + sorted(set(inits or []) - set(INITS))
    if unknown:
        raise ValueError(f"scenarios/inits: unknown {unknown}; scenarios: {', '.join(SCENARIOS)}; "
                         f"inits: {', '.join(INITS)}")
    for field, given in (("scenarios", scenarios or []), ("inits", inits or [])):
        if twice := given_twice(given):
            raise ValueError(f"{field}: {', '.join(twice)} given more than once; fix: give each once")
    return [(s, i) for s in (scenarios or list(SCENARIOS)) for i in (inits or list(INITS))]


def nightly_runs(target: str, scenarios: list[str] | None = None, inits: list[str] | None = None,
                 **overrides) -> list[tuple[dict, ScenarioRun]]:
    """(parameters, ScenarioRun) of each scenario run of a nightly suite on ``target``, in order: every pair of
    :func:`nightly_suite` with the ``overrides`` given (``steps``, ``lr``, ``runs_dir``; None: ScenarioRun's
    default) and the scenario's weights on the target (titan_cfg.scenarios.ON_NODE), all
    validated before the first run starts.

    Raises:
        ValueError: an unknown scenario or init; pydantic.ValidationError (a ValueError): a parameter no run
            of the suite can take (titanflow.refusal.describe tells it).
    """
    runs = []
    for scenario, init in nightly_suite(scenarios, inits):
        given = {"scenario": scenario, "target": target, "init": init, **overrides}
        params = {k: v for k, v in given.items() if v is not None}
        params |= on_node(scenario, node_of(target)).run_parameters  # trn2: the walkthrough's models
        runs.append((params, ScenarioRun(**params)))
    return runs
