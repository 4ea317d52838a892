"""The deployments ``deployments/prefect.yaml`` must hold, derived from the registries.

One ``qwen3-scenario`` deployment per scenario x target with a work pool x init, named
``<scenario>-<target>-<init>`` and tagged ``scenario:``, ``target:``, ``init:``, with the target's
weights for the scenario (titan_cfg.scenarios.ON_NODE); one ``qwen3-nightly`` deployment per such target,
``nightly-<target>`` (whose runs take the same weights); one ``qwen3-bisect`` deployment per target in
:data:`BISECT_TARGETS`, ``bisect-<target>``, run on demand with the revisions as parameters. The YAML stays the file
Prefect deploys (``prefect deploy`` reads it); :func:`check_prefect_yaml` says where it and
the registries part, and ``make server`` refuses a file that does not hold them. Its ``deployments:`` list is written
from the registries (:func:`write_prefect_yaml`; after adding a scenario, a target's work pool or an init:
``python -m titanflow.prefect_ops.deployments``); the part above it, the pools' pull steps and schedules, is kept by
hand: each pool ``<pool>`` has the anchors ``scenario_<pool>`` and ``nightly_<pool>`` there (``-`` as ``_``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from titan_cfg.scenarios import SCENARIOS, on_node
from titan_cfg.targets import TARGETS, node_of
from titanflow.params import INITS
from titanflow.paths import REPO_ROOT

#: The deployments file, deployed from the repository root (entrypoints are relative to it).
PREFECT_YAML = REPO_ROOT / "deployments" / "prefect.yaml"

def work_pools() -> dict[str, tuple[str, dict]]:
    """Work pool -> (the target its runs take, the parameters every run of it adds), from each target's
    ``work_pools`` (titan_cfg.targets).

    Raises:
        ValueError: two targets name the same pool (a target copied with its pools), naming both and the fix.
    """
    pools: dict[str, tuple[str, dict]] = {}
    for name, target in TARGETS.items():
        for pool, added in target().work_pools.items():
            if pool in pools:
                raise ValueError(f"work_pools: targets {pools[pool][0]} and {name} both name the work pool {pool}; "
                                 f"fix: give {name} its own pool, or work_pools={{}} for none")
            pools[pool] = (name, added)
    return pools


#: Work pool -> (the target its runs take, the parameters every run of it adds): :func:`work_pools`.
WORK_POOLS = work_pools()
#: Work pools that are not of Prefect's ``process`` type: pool -> (type, its base job template file).
POOL_TEMPLATES = {"trn2-eks": ("kubernetes", REPO_ROOT / "deployments" / "kubernetes" / "trn2-eks.json")}


#: Work pools whose flow runs first install the trn2 profile on their node (a pull step ``make setup-trn2``:
#: profiles/trn2/setup.sh, which ends with titanflow doctor). A pull step cannot read the flow run's parameters, so each
#: scenario deployment of such a pool takes the pull step of its scenario, the hand-kept anchor
#: ``pull_<pool>_<scenario>`` (``-`` as ``_``), and the pool's nightly ``pull_<pool>``, whose doctor checks every
#: scenario: each checks the weights of the runs it starts (:func:`setup_script`).
SETUP_POOLS = ("trn2",)


def setup_script(scenarios: tuple[str, ...]) -> str:
    """The pull step's script that installs the trn2 profile and has titanflow doctor check the runs of ``scenarios``
    (their weights: titan_cfg.scenarios.ON_NODE): ``make setup-trn2 SCENARIOS=moe``; several are quoted as one word
    (Prefect splits the script as a shell would, shlex)."""
    return f"make setup-trn2 SCENARIOS={scenarios[0]}" if len(scenarios) == 1 else (
        f'make setup-trn2 "SCENARIOS={" ".join(scenarios)}"')


def pull_scripts(deployment: dict, config: dict) -> list[str]:
    """The scripts of ``deployment``'s pull steps (a deployment of prefect.yaml, loaded), else of the file's
    ``config`` pull steps: those of Prefect's ``run_shell_script`` step."""
    return [step["prefect.deployments.steps.run_shell_script"]["script"] for step in deployment.get("pull", config["pull"])
            if "prefect.deployments.steps.run_shell_script" in step]


def expected_pull_scripts(name: str, row: dict) -> list[str]:
    """The pull scripts deployment ``name`` (its :func:`expected_deployments` row) must run: on a pool of
    :data:`SETUP_POOLS` the profile's install for its scenario (a nightly: every scenario), elsewhere none."""
    if row["work_pool"] not in SETUP_POOLS:
        return []
    return [setup_script(tuple(SCENARIOS) if row["flow"].startswith("flows/nightly.py")
                         else (row["parameters"]["scenario"],))]


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
                                   **on_node(scenario, node_of(target)).run_parameters},
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
    config = yaml.safe_load(prefect_yaml.read_text())
    found = {d["name"]: {"flow": d["entrypoint"], "work_pool": d["work_pool"]["name"],
                         "parameters": d.get("parameters", {}), "tags": d.get("tags", []),
                         "pull scripts": pull_scripts(d, config)} for d in config["deployments"]}
    expected = {name: {**row, "pull scripts": expected_pull_scripts(name, row)}
                for name, row in expected_deployments().items()}
    problems = [f"{name}: missing" for name in expected if name not in found]
    problems += [f"{name}: not a scenario x target x init of the registries" for name in found if name not in expected]
    problems += [f"{name}: {key} is {found[name][key]!r}, expected {row[key]!r}"
                 for name, row in expected.items() if name in found for key in row if found[name][key] != row[key]]
    return problems


#: The line that opens the part of prefect.yaml :func:`write_prefect_yaml` writes (to the end of the file).
GENERATED = "deployments:  # written from the registries by `python -m titanflow.prefect_ops.deployments`: do not edit"

#: A YAML scalar that needs no quotes in a flow mapping: letters, digits and ``_ . / -``, not starting with ``-``.
_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")


def _flow_yaml(value) -> str:
    """``value`` (a dict, list, str or number) as YAML flow style: ``{a: 1, b: x}``; strings quoted only when needed."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow_yaml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow_yaml(item) for item in value) + "]"
    if isinstance(value, str) and not _PLAIN.fullmatch(value):
        return json.dumps(value)
    return str(value)


def _anchor(pool: str) -> str:
    return pool.replace("-", "_")


def deployment_lines() -> list[str]:
    """The ``deployments:`` part of prefect.yaml that :func:`expected_deployments` calls for: per pool its scenario
    deployments, then the nightlies, then the bisects, each row merging the pool's anchor of the hand-kept part."""
    rows = expected_deployments()
    lines = [GENERATED]
    for pool, (target, _) in WORK_POOLS.items():
        lines.append(f"  # qwen3-scenario on {pool} (target {target})")
        for name, row in rows.items():
            if row["work_pool"] == pool and row["flow"].startswith("flows/scenario.py"):
                pull = (f" pull: *pull_{_anchor(pool)}_{row['parameters']['scenario']}," if pool in SETUP_POOLS else "")
                lines += [f"  - {{<<: *scenario_{_anchor(pool)}, name: {name},{pull} "
                          f"parameters: {_flow_yaml(row['parameters'])},",
                          f"     tags: {json.dumps(row['tags'])}}}"]
        lines.append("")
    lines.append("  # qwen3-nightly: the scenarios of one target, nightly")
    for name, row in rows.items():
        if row["flow"].startswith("flows/nightly.py"):
            lines += [f"  - {{<<: *nightly_{_anchor(row['work_pool'])}, name: {name}, schedules: *nightly_cron,",
                      f"     parameters: {_flow_yaml(row['parameters'])}, tags: {json.dumps(row['tags'])}}}"]
    lines += ["", "  # qwen3-bisect: on demand; the probes' venvs for revisions with other dependencies are cpu-profile builds"]
    for name, row in rows.items():
        if row["flow"].startswith("flows/bisection.py"):
            lines.append(f"  - {{<<: *bisect, name: {name}, work_pool: *{_anchor(row['work_pool'])}_pool, "
                         f"parameters: {_flow_yaml(row['parameters'])}, tags: {json.dumps(row['tags'])}}}")
    return lines


def write_prefect_yaml(prefect_yaml: Path = PREFECT_YAML) -> bool:
    """Rewrite the ``deployments:`` part of ``prefect_yaml`` (from its :data:`GENERATED` line to the end) from the
    registries; True when the file changed.

    Raises:
        ValueError: the file has no :data:`GENERATED` line (the part to write is not marked).
    """
    text = prefect_yaml.read_text()
    if GENERATED not in text:
        raise ValueError(f"{prefect_yaml}: no line {GENERATED!r} opens its deployments; fix: restore it from the "
                         "repository")
    written = text[:text.index(GENERATED)] + "\n".join(deployment_lines()) + "\n"
    if written == text:
        return False
    prefect_yaml.write_text(written)
    return True


if __name__ == "__main__":
    changed = write_prefect_yaml(Path(sys.argv[1]) if len(sys.argv) > 1 else PREFECT_YAML)
    print(f"{'wrote' if changed else 'unchanged:'} {sys.argv[1] if len(sys.argv) > 1 else PREFECT_YAML}")
