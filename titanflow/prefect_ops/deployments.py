"""The deployments ``deployments/prefect.yaml`` must hold, derived from the registries.

One ``qwen3-scenario`` deployment per scenario x target with a work pool x init, named
``<scenario>-<target>-<init>`` and tagged ``scenario:``, ``target:``, ``init:``, with the target's
weights for the scenario (titan_cfg.scenarios.ON_NODE); one ``qwen3-nightly`` deployment per such target,
``nightly-<target>`` (whose runs take the same weights); one ``qwen3-bisect`` deployment per target in
:data:`BISECT_TARGETS`, ``bisect-<target>``, run on demand with the revisions as parameters. The YAML stays the file
Prefect deploys (``prefect deploy`` reads it); :func:`check_prefect_yaml` says where it and
the registries part, and ``make server`` refuses a file that does not hold them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from titan_cfg.scenarios import SCENARIOS, on_node
from titan_cfg.targets import TARGETS
from titanflow.params import INITS
from titanflow.paths import REPO_ROOT

#: The deployments file, deployed from the repository root (entrypoints are relative to it).
PREFECT_YAML = REPO_ROOT / "deployments" / "prefect.yaml"

#: Work pool -> (the target its runs take, the parameters every run of it adds): each target's ``work_pools``
#: (titan_cfg.targets).
WORK_POOLS: dict[str, tuple[str, dict]] = {pool: (name, added) for name, target in TARGETS.items()
                                           for pool, added in target().work_pools.items()}
#: Work pools that are not of Prefect's ``process`` type: pool -> (type, its base job template file).
POOL_TEMPLATES = {"trn2-eks": ("kubernetes", REPO_ROOT / "deployments" / "kubernetes" / "trn2-eks.json")}


#: Targets with a ``qwen3-bisect`` deployment: those whose record says ``bisect`` (titan_cfg.targets).
BISECT_TARGETS = tuple(name for name, target in TARGETS.items() if target().bisect)


def expected_deployments() -> dict[str, dict]:
    """{deployment name: {"flow", "work_pool", "parameters", "tags"}} the registries call for: names
    ``<scenario>-<pool>-<init>`` and ``nightly-<pool>`` (a pool is named after its target, but for trn2-eks)."""
    rows = {}
    for pool, (target, added) in WORK_POOLS.items():
        for scenario in SCENARIOS:
            for init in INITS:
                rows[f"{scenario}-{pool}-{init}"] = {
                    "flow": "flows/scenario.py:qwen3_scenario", "work_pool": pool,
                    "parameters": {"scenario": scenario, "target": target, "init": init, **added,
                                   **on_node(scenario, TARGETS[target]().node).run_parameters},
                    "tags": [f"scenario:{scenario}", f"target:{target}", f"init:{init}"]}
        rows[f"nightly-{pool}"] = {"flow": "flows/nightly.py:qwen3_nightly", "work_pool": pool,
                                   "parameters": {"target": target, **added},
                                   "tags": ["suite:nightly", f"target:{target}"]}
        if target in BISECT_TARGETS:
            rows[f"bisect-{target}"] = {"flow": "flows/bisection.py:qwen3_bisect", "work_pool": pool,
                                        "parameters": {"target": target}, "tags": ["bisect", f"target:{target}"]}
    return rows


def check_prefect_yaml(prefect_yaml: Path = PREFECT_YAML) -> list[str]:
    """Each way ``prefect_yaml`` differs from :func:`expected_deployments`, in words; [] when it holds them."""
    found = {d["name"]: {"flow": d["entrypoint"], "work_pool": d["work_pool"]["name"],
                         "parameters": d.get("parameters", {}), "tags": d.get("tags", [])}
             for d in yaml.safe_load(prefect_yaml.read_text())["deployments"]}
    expected = expected_deployments()
    problems = [f"{name}: missing" for name in expected if name not in found]
    problems += [f"{name}: not a scenario x target x init of the registries" for name in found if name not in expected]
    problems += [f"{name}: {key} is {found[name][key]!r}, expected {row[key]!r}"
                 for name, row in expected.items() if name in found for key in row if found[name][key] != row[key]]
    return problems
