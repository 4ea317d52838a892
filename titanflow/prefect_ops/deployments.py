"""``deployments/prefect.yaml``, the file Prefect deploys (``prefect deploy`` reads it), written whole from the
registries.

One ``qwen3-scenario`` deployment per scenario x work pool x init, named ``<scenario>-<pool>-<init>`` and tagged
``scenario:``, ``target:``, ``init:``, with the target's weights for the scenario (titan_cfg.scenarios.ON_NODE); one
``qwen3-nightly`` deployment per pool, ``nightly-<pool>`` (whose runs take the same weights); one ``qwen3-bisect``
deployment per target in :data:`BISECT_TARGETS`, ``bisect-<target>``, run on demand with the revisions as parameters;
one ``qwen3-canary`` deployment, ``canary-<target>``, per target whose canary profile names a successor
(:func:`canary_targets`), on the target's first work pool, on its own cron and tags (``suite:canary``).
A work pool is an entry of its target's ``work_pools`` (titan_cfg.targets.WorkPool: its kind, the parameters its runs
add, whether each flow run first installs the target's install profile, titan_cfg.profiles).

:func:`prefect_yaml_text` writes the whole file from them, its anchors (``<pool>_pool``, ``scenario_<pool>``,
``nightly_<pool>``, ``pull_<pool>``, ``pull_<pool>_<scenario>``) and comments included: after adding a scenario, a
target's work pool or an init, ``python -m titanflow.prefect_ops.deployments`` (``make goldens`` runs it), and the
tests hold the committed file to it byte for byte. :func:`check_prefect_yaml` says where a file, loaded as Prefect
loads it, and the registries part (``make server`` refuses a file that does not hold them).

The text is written by hand, not by ``yaml.dump``: PyYAML writes neither comments nor merge keys (``<<: *anchor``)
and names its anchors ``id001``, and the file is read by people choosing a deployment as much as by Prefect.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import yaml

from titan_cfg.scenarios import SCENARIOS, on_node
from titan_cfg.targets import TARGETS, WorkPool, node_of, work_pools
from titanflow.params import INITS
from titanflow.paths import REPO_ROOT
from titanflow.successor import successor_of

#: The deployments file, deployed from the repository root (entrypoints are relative to it).
PREFECT_YAML = REPO_ROOT / "deployments" / "prefect.yaml"
#: Work pool -> (the target its runs take, its record): titan_cfg.targets.work_pools.
WORK_POOLS = work_pools()
#: Targets with a ``qwen3-bisect`` deployment: those whose record says ``bisect`` (titan_cfg.targets).
BISECT_TARGETS = tuple(name for name, target in TARGETS.items() if target().bisect)

#: The flows' entrypoints, relative to the repository root.
SCENARIO_FLOW, NIGHTLY_FLOW, BISECT_FLOW = ("flows/scenario.py:qwen3_scenario", "flows/nightly.py:qwen3_nightly",
                                            "flows/bisection.py:qwen3_bisect")
CANARY_FLOW = "flows/canary.py:qwen3_canary"
#: The nightly's schedule: 02:00 UTC, so results are in before the working day.
NIGHTLY_CRON = {"cron": "0 2 * * *", "timezone": "UTC"}
#: The canary's schedule: 05:00 UTC, after the nightly (02:00), which it waits for on the node's training slot.
CANARY_CRON = {"cron": "0 5 * * *", "timezone": "UTC"}
#: The Prefect version the file says it is written for (its ``prefect-version``: the one pyproject.toml's range
#: was tested with).
PREFECT_VERSION = "3.9.1"


def pull_scripts(deployment: dict, config: dict) -> list[str]:
    """The scripts of ``deployment``'s pull steps (a deployment of prefect.yaml, loaded), else of the file's
    ``config`` pull steps: those of Prefect's ``run_shell_script`` step."""
    return [step["prefect.deployments.steps.run_shell_script"]["script"] for step in deployment.get("pull", config["pull"])
            if "prefect.deployments.steps.run_shell_script" in step]


def install_script(pool: str, scenarios: tuple[str, ...]) -> str | None:
    """The pull script a flow run of ``pool`` that runs ``scenarios`` installs its target's profile with
    (titan_cfg.profiles.Profile.pull_script); None when the pool's record does not say ``install``."""
    target, record = WORK_POOLS[pool]
    return TARGETS[target]().install_profile.pull_script(scenarios) if record.install else None


def canary_targets(root: Path = REPO_ROOT) -> dict[str, tuple[str, str]]:
    """{target: (its first work pool, the profile its canary pins)} of each target whose ``canary_profile``
    (titan_cfg.targets) names a successor in ``<root>/profiles`` (titanflow.successor.successor_of).

    Raises:
        ValueError: a canary profile's successor file is bad (empty, names itself or a missing profile).
    """
    found = {}
    for pool, (target, _) in WORK_POOLS.items():
        profile = TARGETS[target]().canary_profile
        if target not in found and profile and successor_of(profile, root):
            found[target] = (pool, profile)
    return found


def expected_pull_scripts(name: str, row: dict) -> list[str]:
    """The pull scripts deployment ``name`` (its :func:`expected_deployments` row) must run: on a pool that installs
    its target's profile, the install for its scenario (a nightly: every scenario), elsewhere none."""
    scenarios = tuple(SCENARIOS) if row["flow"] == NIGHTLY_FLOW else (row["parameters"].get("scenario"),)
    script = install_script(row["work_pool"], scenarios) if row["flow"] not in (BISECT_FLOW, CANARY_FLOW) else None
    return [script] if script else []


def expected_deployments() -> dict[str, dict]:
    """{deployment name: {"flow", "work_pool", "parameters", "tags", "schedules"}} the registries call for: names
    ``<scenario>-<pool>-<init>`` and ``nightly-<pool>`` (a pool is named after its target, but for trn2-eks),
    ``bisect-<target>``, ``canary-<target>``."""
    rows = {}
    for pool, (target, record) in WORK_POOLS.items():
        for scenario in SCENARIOS:
            for init in INITS:
                rows[f"{scenario}-{pool}-{init}"] = {
                    "flow": SCENARIO_FLOW, "work_pool": pool,
                    "parameters": {"scenario": scenario, "target": target, "init": init, **record.parameters,
                                   **on_node(scenario, node_of(target)).run_parameters},
                    "tags": [f"scenario:{scenario}", f"target:{target}", f"init:{init}"], "schedules": []}
        rows[f"nightly-{pool}"] = {"flow": NIGHTLY_FLOW, "work_pool": pool,
                                   "parameters": {"target": target, **record.parameters},
                                   "tags": ["suite:nightly", f"target:{target}"], "schedules": [NIGHTLY_CRON]}
        if target in BISECT_TARGETS:
            rows[f"bisect-{target}"] = {"flow": BISECT_FLOW, "work_pool": pool, "parameters": {"target": target},
                                        "tags": ["bisect", f"target:{target}"], "schedules": []}
    for target, (pool, profile) in canary_targets().items():
        rows[f"canary-{target}"] = {"flow": CANARY_FLOW, "work_pool": pool,
                                    "parameters": {"profile": profile, "target": target},
                                    "tags": ["suite:canary", f"target:{target}"], "schedules": [CANARY_CRON]}
    return rows


def check_prefect_yaml(prefect_yaml: Path = PREFECT_YAML) -> list[str]:
    """Each way ``prefect_yaml``, loaded as Prefect loads it (anchors and merge keys resolved), differs from
    :func:`expected_deployments` and their pull scripts, in words; [] when it holds them."""
    config = yaml.safe_load(prefect_yaml.read_text())
    found = {d["name"]: {"flow": d["entrypoint"], "work_pool": d["work_pool"]["name"],
                         "parameters": d.get("parameters", {}), "tags": d.get("tags", []),
                         "schedules": d.get("schedules", []), "pull scripts": pull_scripts(d, config)}
             for d in config["deployments"]}
    expected = {name: {**row, "pull scripts": expected_pull_scripts(name, row)}
                for name, row in expected_deployments().items()}
    problems = [f"{name}: missing" for name in expected if name not in found]
    problems += [f"{name}: not a scenario x target x init of the registries" for name in found if name not in expected]
    problems += [f"{name}: {key} is {found[name][key]!r}, expected {row[key]!r}"
                 for name, row in expected.items() if name in found for key in row if found[name][key] != row[key]]
    return problems


#: A YAML scalar that needs no quotes in a flow mapping: letters, digits and ``_ . / -``, not starting with ``-``.
_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")
#: Columns of the file's comments.
WIDTH = 118


def _flow_yaml(value) -> str:
    """``value`` (a dict, list, str or number) as YAML flow style: ``{a: 1, b: x}``; strings quoted only when needed."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow_yaml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow_yaml(item) for item in value) + "]"
    if isinstance(value, str) and not _PLAIN.fullmatch(value):
        return json.dumps(value)
    return str(value)


def _block_scalar(value: str) -> str:
    """``value`` as a YAML scalar of block style: plain where YAML reads it back as this string, else quoted."""
    if value.strip() == value and yaml.safe_load(value) == value and not set("'\"#") & set(value):
        return value
    return f"'{value}'" if "'" not in value else json.dumps(value)


def _anchor(pool: str) -> str:
    return pool.replace("-", "_")


def _comment(text: str, first: str = "# ", hanging: str = "") -> list[str]:
    """``text`` as comment lines of at most :data:`WIDTH` columns (longer words stay whole), the first one opened by
    ``first``, the others by ``first`` and ``hanging``."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=first + hanging,
                         break_long_words=False, break_on_hyphens=False)


_HEAD = """\
# Prefect deployments of titanflow, written whole from the registries by `python -m titanflow.prefect_ops.deployments`
# (`make goldens` runs it): the scenarios (titan_cfg/scenarios.py), the targets' work pools (titan_cfg/targets.py) and
# their install profiles (titan_cfg/profiles.py). Do not edit it: tests/unit/prefect_ops/test_deployments_table.py
# holds it to what the command writes, byte for byte.
#
#   qwen3-scenario/<scenario>-<pool>-<init>     one scenario run, on demand, on a work pool of its target (below)
#   qwen3-nightly/nightly-<pool>                every scenario of a target, nightly (cron)
#   qwen3-bisect/bisect-<target>                the first revision whose run fails, on demand:
#       prefect deployment run 'qwen3-bisect/bisect-cpu' --param good=<rev> --param bad=<rev> --param scenario=native
#   qwen3-canary/canary-<target>                a profile's successor beside it, the nightly's suite (cron)
#
# Deploy from the repository root (entrypoints are resolved against the current directory):
#   prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml
# `make server` does this against a local server (titanflow/prefect_ops/server.py).
#"""

_FOOT = """\
# A flow run starts in $TITANFLOW_ROOT of its worker (the pull step below, resolved at run
# time), so one deployment serves every checkout; the worker must export it.
#
# Parameters left out take ScenarioRun's defaults (titanflow/params.py); the deployment's
# parameter schema comes from the flow's signature and is enforced, so `--param steps=abc`
# is refused instead of falling back to a default."""


def _workdir(indent: str) -> list[str]:
    """The pull step every flow run starts with, as a list item at ``indent``: the worker's $TITANFLOW_ROOT (resolved
    at run time) as the working directory."""
    return [f"{indent}- prefect.deployments.steps.set_working_directory:",
            f'{indent}    directory: "{{{{ $TITANFLOW_ROOT }}}}"']


def _pool_comment(pool: str, target: str, record: WorkPool) -> list[str]:
    """The header's lines on ``pool``: its type, target and install step, then its record's note and the commands
    that create it (a pool of another type than ``process``) and start its worker."""
    kind = f"type {record.kind}" + (f", base job template {record.template}" if record.template else "")
    install = f"; each flow run first installs the {TARGETS[target]().profile} profile" if record.install else ""
    lines = _comment(f"{pool} ({kind}; target {target}{install}): {record.note}:", "#   ", "  ")
    commands = ([f"prefect work-pool create {pool} --type {record.kind} --base-job-template {record.template}"]
                if record.kind != "process" else []) + [record.worker]
    return lines + [line for command in commands for line in _comment(command, "#       ", "  ")]


def _header_lines() -> list[str]:
    lines = [_HEAD, "# Work pools (each target's `work_pools` in titan_cfg/targets.py; docs/deployments.md):"]
    for pool, (target, record) in WORK_POOLS.items():
        lines += _pool_comment(pool, target, record)
    return lines + ["#", _FOOT]


def _definition_lines() -> list[str]:
    """The ``definitions:`` part: the anchors each deployment merges (pull steps, pools, flows, each pool's
    scenario and nightly bases, the nightly's schedule)."""
    lines = ["definitions:"]
    installing = [pool for pool, (_, record) in WORK_POOLS.items() if record.install]
    if installing:
        lines += _comment(
            "The install step of a pool whose record says `install` (titan_cfg/targets.py): each flow run first brings "
            "its node to the target's install profile (titan_cfg/profiles.py; trn2: make setup-trn2, "
            "profiles/trn2/setup.sh, idempotent; it ends with titanflow doctor --target trn2 --scenario <the run's>), "
            "so a node that cannot run it fails here, before any task, with one line per missing piece, the "
            "scenario's weights among them. A pull step cannot read the flow run's parameters, so each scenario has "
            "its own, pull_<pool>_<scenario>, and the nightly's, pull_<pool>, checks every scenario "
            "(titanflow.prefect_ops.deployments.install_script: the scripts, which check_prefect_yaml holds them to).",
            "  # ")
    for pool in installing:
        for anchor, scenarios in ((f"pull_{_anchor(pool)}", tuple(SCENARIOS)),
                                  *((f"pull_{_anchor(pool)}_{s}", (s,)) for s in SCENARIOS)):
            lines += [f"  {anchor}: &{anchor}", *_workdir("    "), "    - prefect.deployments.steps.run_shell_script:",
                      f"        script: {_block_scalar(install_script(pool, scenarios))}",
                      "        stream_output: true"]
    lines.append("  work_pools:")
    for pool in WORK_POOLS:
        lines += [f"    {_anchor(pool)}: &{_anchor(pool)}_pool", f"      name: {_block_scalar(pool)}"]
    lines += ["  flows:",
              "    scenario: &scenario", f"      entrypoint: {SCENARIO_FLOW}",
              "      schedules: []  # on demand: `prefect deployment run 'qwen3-scenario/<name>'`",
              "    nightly: &nightly", f"      entrypoint: {NIGHTLY_FLOW}",
              "    bisect: &bisect", f"      entrypoint: {BISECT_FLOW}",
              "      schedules: []  # on demand: good and bad are given at run time",
              "    canary: &canary", f"      entrypoint: {CANARY_FLOW}",
              "  targets:"]
    for pool, (_, record) in WORK_POOLS.items():
        pull = (f"  # each deployment adds the pull step of its scenario, pull_{_anchor(pool)}_<scenario>"
                if record.install else "")
        lines += [f"    scenario_{_anchor(pool)}: &scenario_{_anchor(pool)}{pull}", "      <<: *scenario",
                  f"      work_pool: *{_anchor(pool)}_pool"]
    lines += ["  # the nightly of each pool: its pool and pull steps, as the pool's scenario runs have them",
              "  nightlies:"]
    for pool, (_, record) in WORK_POOLS.items():
        lines += [f"    nightly_{_anchor(pool)}: &nightly_{_anchor(pool)}", "      <<: *nightly",
                  f"      work_pool: *{_anchor(pool)}_pool"] + ([f"      pull: *pull_{_anchor(pool)}"] if record.install
                                                                else [])
    return lines + ["  schedules:", "    nightly: &nightly_cron",
                    f"      - cron: {json.dumps(NIGHTLY_CRON['cron'])}  # 02:00 UTC: results are in before the "
                    "working day", f"        timezone: {NIGHTLY_CRON['timezone']}",
                    "    canary: &canary_cron",
                    f"      - cron: {json.dumps(CANARY_CRON['cron'])}  # 05:00 UTC: after the nightly, whose slot it "
                    "waits for", f"        timezone: {CANARY_CRON['timezone']}"]


def deployment_lines() -> list[str]:
    """The ``deployments:`` list :func:`expected_deployments` calls for: per pool its scenario deployments, then the
    nightlies, then the bisects, each row merging its pool's anchors of the ``definitions:``."""
    rows = expected_deployments()
    lines = ["deployments:"]
    for pool, (target, record) in WORK_POOLS.items():
        lines.append(f"  # qwen3-scenario on {pool} (target {target})")
        for name, row in rows.items():
            if row["work_pool"] == pool and row["flow"] == SCENARIO_FLOW:
                pull = f" pull: *pull_{_anchor(pool)}_{row['parameters']['scenario']}," if record.install else ""
                lines += [f"  - {{<<: *scenario_{_anchor(pool)}, name: {name},{pull} "
                          f"parameters: {_flow_yaml(row['parameters'])},",
                          f"     tags: {json.dumps(row['tags'])}}}"]
        lines.append("")
    lines.append("  # qwen3-nightly: the scenarios of one target, nightly")
    for name, row in rows.items():
        if row["flow"] == NIGHTLY_FLOW:
            lines += [f"  - {{<<: *nightly_{_anchor(row['work_pool'])}, name: {name}, schedules: *nightly_cron,",
                      f"     parameters: {_flow_yaml(row['parameters'])}, tags: {json.dumps(row['tags'])}}}"]
    lines += ["", "  # qwen3-bisect: on demand; the probes' venvs for revisions with other dependencies are cpu-profile builds"]
    for name, row in rows.items():
        if row["flow"] == BISECT_FLOW:
            lines.append(f"  - {{<<: *bisect, name: {name}, work_pool: *{_anchor(row['work_pool'])}_pool, "
                         f"parameters: {_flow_yaml(row['parameters'])}, tags: {json.dumps(row['tags'])}}}")
    canaries = [(name, row) for name, row in rows.items() if row["flow"] == CANARY_FLOW]
    if canaries:
        lines += ["", "  # qwen3-canary: a profile's successor beside it, apart from the nightly's history and alerts"]
    for name, row in canaries:
        lines += [f"  - {{<<: *canary, name: {name}, work_pool: *{_anchor(row['work_pool'])}_pool, "
                  "schedules: *canary_cron,",
                  f"     parameters: {_flow_yaml(row['parameters'])}, tags: {json.dumps(row['tags'])}}}"]
    return lines


def prefect_yaml_text() -> str:
    """The whole of deployments/prefect.yaml as the registries call for it: the header (the deployments, how to deploy
    them, each work pool and its worker), Prefect's project settings, the ``definitions:`` anchors and the
    ``deployments:`` list."""
    lines = [*_header_lines(), "name: titanflow", f"prefect-version: {PREFECT_VERSION}", "", "pull:",
             *_workdir("  "), "", *_definition_lines(), "", *deployment_lines()]
    return "\n".join(lines) + "\n"


def write_prefect_yaml(prefect_yaml: Path = PREFECT_YAML) -> bool:
    """Write ``prefect_yaml`` whole from the registries (:func:`prefect_yaml_text`); True when the file changed."""
    text = prefect_yaml_text()
    if prefect_yaml.is_file() and prefect_yaml.read_text() == text:
        return False
    prefect_yaml.write_text(text)
    return True


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else PREFECT_YAML
    print(f"{'wrote' if write_prefect_yaml(path) else 'unchanged:'} {path}")
