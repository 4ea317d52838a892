"""The deployments ``deployments/prefect.yaml`` must hold, derived from the registries.

One ``qwen3-scenario`` deployment per scenario x target with a work pool x init, named
``<scenario>-<target>-<init>`` and tagged ``scenario:``, ``target:``, ``init:``, with the target's
weights for the scenario (:data:`TARGET_WEIGHTS`); one ``qwen3-nightly`` deployment per such target,
``nightly-<target>`` (whose runs take the same weights); one ``qwen3-bisect`` deployment per target in
:data:`BISECT_TARGETS`, ``bisect-<target>``, run on demand with the revisions as parameters. The YAML stays the file
Prefect deploys (``prefect deploy`` reads it); :func:`check_prefect_yaml` says where it and
the registries part, and ``make server`` refuses a file that does not hold them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from titan_cfg.scenarios import SCENARIOS
from titanflow.paths import REPO_ROOT
from titanflow.run.params import INITS

#: The deployments file, deployed from the repository root (entrypoints are relative to it).
PREFECT_YAML = REPO_ROOT / "deployments" / "prefect.yaml"

#: Work pool -> (the target its runs take, the parameters every run of it adds). ``cuda`` has none: no CUDA node is
#: part of the reference set-up, and a deployment nothing can pick up would only queue runs. ``trn2-cluster``'s
#: worker runs on the Slurm cluster's login node and submits each training as a Slurm job (titanflow.slurm);
#: ``trn2-eks`` is a Kubernetes work pool (deployments/kubernetes/trn2-eks.json): each flow run is a Kubernetes
#: job whose pods are the trn2-cluster target's nodes (titanflow.kubernetes).
WORK_POOLS: dict[str, tuple[str, dict]] = {
    "cpu": ("cpu", {}), "trn2": ("trn2", {}), "trn2-cluster": ("trn2-cluster", {}),
    "trn2-eks": ("trn2-cluster", {"scheduler": "kubernetes"}),
}
#: Work pools that are not of Prefect's ``process`` type: pool -> (type, its base job template file).
POOL_TEMPLATES = {"trn2-eks": ("kubernetes", REPO_ROOT / "deployments" / "kubernetes" / "trn2-eks.json")}


#: Target -> scenario -> the weights parameters its runs take (none: the embedded tiny models, cpu). trn2
#: trains the walkthrough's models: scenarios 1 and 2 on Qwen/Qwen3-4B-Instruct-2507, scenario 3 on
#: Qwen/Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4 (the flow's trim_weights step). Hub ids, so the
#: runs know their weights id (the published 6.54 / 12.43 are keyed by it); the node reads them offline
#: from $TITANFLOW_WEIGHTS_ROOT/<id> or its HF cache (titanflow.weights.resolve).
TARGET_WEIGHTS: dict[str, dict[str, dict]] = {
    "trn2": {
        "native": {"weights": "Qwen/Qwen3-4B-Instruct-2507"},
        "hf_backend": {"weights": "Qwen/Qwen3-4B-Instruct-2507"},
        "moe": {"weights": "Qwen/Qwen3-30B-A3B", "trim": {"layers": 4, "experts": 64, "top_k": 4}},
    },
}
TARGET_WEIGHTS["trn2-cluster"] = TARGET_WEIGHTS["trn2"]  # the same models on many trn2 nodes


#: Targets with a ``qwen3-bisect`` deployment: those whose environment a bisect can build for a revision whose
#: dependencies differ (titanflow.bisect.environment: the cpu install profile's Makefile target).
BISECT_TARGETS = ("cpu",)


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
                                   **TARGET_WEIGHTS.get(target, {}).get(scenario, {})},
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
