"""deployments/prefect.yaml and the flows' signatures against the registries they must follow."""

import inspect
import logging
import os
import subprocess
import typing

import pytest

from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS
from titanflow.flows.bisection import qwen3_bisect
from titanflow.flows.nightly import qwen3_nightly
from titanflow.flows.scenario import qwen3_scenario
from titanflow.params import INITS, ScenarioRun
from titanflow.paths import REPO_ROOT
from titanflow.prefect_ops.deployments import (BISECT_TARGETS, WORK_POOLS, canary_targets, check_prefect_yaml,
                                               expected_deployments)


def test_prefect_yaml_holds_every_scenario_x_target_x_init_and_a_nightly_per_target():
    assert check_prefect_yaml() == []
    rows = expected_deployments()
    # 3 scenarios x 4 work pools (cpu, trn2, trn2-cluster, trn2-eks) x 2 inits, a nightly per pool, bisect-cpu,
    # canary-cpu (profiles/cpu-lowest/successor names cpu; no profiles/trn2-next/ yet)
    assert canary_targets() == {"cpu": ("cpu", "cpu-lowest")}
    assert len(rows) == (len(SCENARIOS) * len(WORK_POOLS) * len(INITS) + len(WORK_POOLS) + len(BISECT_TARGETS)
                         + len(canary_targets()))
    assert rows["native-trn2-cluster-random"]["work_pool"] == "trn2-cluster"
    assert {target for target, _ in WORK_POOLS.values()} <= set(TARGETS) and set(BISECT_TARGETS) <= set(WORK_POOLS)
    # trn2 nodes on EKS: the trn2-cluster target's runs, each on the pods of a Kubernetes job
    assert rows["moe-trn2-eks-pretrained"]["parameters"] == {
        "scenario": "moe", "target": "trn2-cluster", "init": "pretrained", "scheduler": "kubernetes",
        "weights": "Qwen/Qwen3-30B-A3B", "trim": {"layers": 4, "experts": 64, "top_k": 4}}
    assert rows["nightly-trn2-eks"]["parameters"] == {"target": "trn2-cluster", "scheduler": "kubernetes"}
    assert rows["bisect-cpu"] == {"flow": "flows/bisection.py:qwen3_bisect", "work_pool": "cpu",
                                  "parameters": {"target": "cpu"}, "tags": ["bisect", "target:cpu"], "schedules": []}
    assert rows["nightly-trn2"]["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC"}]
    # the canary: its own flow, tags and cron, never the nightly's (whose alerts watch qwen3-nightly runs)
    assert rows["canary-cpu"] == {"flow": "flows/canary.py:qwen3_canary", "work_pool": "cpu",
                                  "parameters": {"profile": "cpu-lowest", "target": "cpu"},
                                  "tags": ["suite:canary", "target:cpu"],
                                  "schedules": [{"cron": "0 5 * * *", "timezone": "UTC"}]}


def test_a_deployment_missing_from_the_yaml_is_named(tmp_path):
    import yaml

    from titanflow.prefect_ops.deployments import PREFECT_YAML

    config = yaml.safe_load(PREFECT_YAML.read_text())
    config["deployments"] = [d for d in config["deployments"] if d["name"] != "moe-trn2-pretrained"]
    config["deployments"][0]["parameters"] = {**config["deployments"][0]["parameters"], "init": "pretrained"}
    stale = tmp_path / "prefect.yaml"
    stale.write_text(yaml.safe_dump(config, sort_keys=False))
    assert check_prefect_yaml(stale) == [
        "moe-trn2-pretrained: missing",
        "native-cpu-random: parameters is {'scenario': 'native', 'target': 'cpu', 'init': 'pretrained'}, expected "
        "{'scenario': 'native', 'target': 'cpu', 'init': 'random'}"]


def test_the_scenario_flow_takes_exactly_the_fields_of_scenario_run():
    parameters = inspect.signature(qwen3_scenario.fn).parameters
    assert list(parameters) == [name for name in ScenarioRun.model_fields if name != "tolerances"]
    assert all(p.default is None for p in parameters.values())  # None: ScenarioRun's default


def test_closed_choices_are_the_registries():
    hints = typing.get_type_hints(qwen3_scenario.fn)
    assert set(typing.get_args(typing.get_args(hints["scenario"])[0])) == set(SCENARIOS)
    assert set(typing.get_args(typing.get_args(hints["target"])[0])) == set(TARGETS)
    assert set(typing.get_args(typing.get_args(hints["init"])[0])) == set(INITS) == {"random", "pretrained"}
    assert set(typing.get_args(typing.get_type_hints(qwen3_nightly.fn)["target"])) == set(TARGETS)
    bisect = typing.get_type_hints(qwen3_bisect.fn)
    assert (set(typing.get_args(bisect["scenario"])), set(typing.get_args(bisect["target"])),
            set(typing.get_args(bisect["init"]))) == (set(SCENARIOS), set(TARGETS), set(INITS))


def test_the_bisect_flow_needs_its_revisions_and_takes_the_rest_from_defaults():
    """good and bad have no default: a deployment run without them is refused by the server's parameter schema."""
    parameters = inspect.signature(qwen3_bisect.fn).parameters
    assert [n for n, p in parameters.items() if p.default is inspect.Parameter.empty] == ["good", "bad"]
    assert {n: parameters[n].default for n in ("scenario", "target", "init", "steps")} == {
        "scenario": "native", "target": "cpu", "init": "random", "steps": None}


def test_trn2_deployments_train_the_walkthroughs_models():
    """Scenarios 1 and 2 on the published Qwen3-4B-Instruct-2507 (a Hub id: its weights id keys the
    walkthrough's 6.54 / 12.43), scenario 3 on Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4;
    every parameter set is one the flow accepts."""
    import yaml

    from titanflow.prefect_ops.deployments import PREFECT_YAML

    found = {d["name"]: d["parameters"] for d in yaml.safe_load(PREFECT_YAML.read_text())["deployments"]}
    for init in INITS:
        for scenario in ("native", "hf_backend"):
            assert found[f"{scenario}-trn2-{init}"]["weights"] == "Qwen/Qwen3-4B-Instruct-2507"
        assert found[f"moe-trn2-{init}"]["weights"] == "Qwen/Qwen3-30B-A3B"
        assert found[f"moe-trn2-{init}"]["trim"] == {"layers": 4, "experts": 64, "top_k": 4}
        assert "weights" not in found[f"native-cpu-{init}"]  # cpu: the embedded tiny models
    for name, parameters in found.items():
        if not name.startswith(("nightly-", "canary-")):
            ScenarioRun.model_validate(parameters)


def test_the_trn2_nightly_runs_take_the_deployments_weights(monkeypatch, tmp_path):
    """nightly-trn2 passes only the target: each of its scenario runs gets the weights of the scenario's
    deployment (titan_cfg.scenarios.ON_NODE: the walkthrough's trimmed Qwen3-30B-A3B), not the embedded tiny models."""
    from titan_cfg.scenarios import WALKTHROUGH_TRIM
    from titanflow.flows import nightly

    calls = []

    def scenario_run(**params):
        calls.append(params)
        raise RuntimeError("stop")  # the suite stops at its first run: its parameters are what is checked

    monkeypatch.setattr(nightly, "qwen3_scenario", scenario_run)
    monkeypatch.setattr(nightly, "get_run_logger", lambda: logging.getLogger("nightly"))  # no flow run here
    with pytest.raises(RuntimeError, match="stop"):
        nightly.qwen3_nightly.fn(target="trn2", scenarios=["moe"], inits=["pretrained"], runs_dir=str(tmp_path))
    assert calls[0]["weights"] == "Qwen/Qwen3-30B-A3B" and calls[0]["trim"] == WALKTHROUGH_TRIM == {"layers": 4, "experts": 64,
                                                                                               "top_k": 4}


def test_every_trn2_deployment_installs_the_trn2_profile_before_it_runs_and_no_cpu_one_does():
    """The trn2 pool's pull step runs make setup-trn2 (profiles/trn2/setup.sh, which ends with titanflow
    doctor --target trn2) for the deployment's own scenario (the nightly's: every scenario); cpu deployments only set
    the working directory (the CI machine's venv is set)."""
    import yaml

    from titanflow.prefect_ops.deployments import PREFECT_YAML, pull_scripts

    config = yaml.safe_load(PREFECT_YAML.read_text())
    for deployment in config["deployments"]:
        scenarios = ([deployment["parameters"]["scenario"]] if "scenario" in deployment.get("parameters", {})
                     else list(SCENARIOS))
        wanted = (f"make setup-trn2 SCENARIOS={scenarios[0]}" if len(scenarios) == 1
                  else f'make setup-trn2 "SCENARIOS={" ".join(scenarios)}"')
        assert pull_scripts(deployment, config) == ([wanted] if deployment["work_pool"]["name"] == "trn2" else []), \
            deployment["name"]
        steps = deployment.get("pull", config["pull"])
        assert "prefect.deployments.steps.set_working_directory" in steps[0]


@pytest.mark.parametrize(("deployment", "doctors"), [
    ("moe-trn2-random", [["--scenario", "moe"]]),
    ("hf_backend-trn2-pretrained", [["--scenario", "hf_backend"]]),
    ("nightly-trn2", [["--scenario", "native"], ["--scenario", "hf_backend"], ["--scenario", "moe"]]),
])
def test_the_pull_step_of_a_trn2_deployment_has_doctor_check_its_own_scenario(deployment, doctors):
    """The pull step's script, run as Prefect runs it (split as a shell would) with PRINT=1: the doctor it ends with
    checks the deployment's scenario, whose weights doctor then takes from the deployments (moe: Qwen3-30B-A3B
    trimmed; titanflow.run.checks.default_weights), not native's."""
    import shlex

    import yaml

    from titanflow.prefect_ops.deployments import PREFECT_YAML, pull_scripts
    from titanflow.run.checks import default_weights

    config = yaml.safe_load(PREFECT_YAML.read_text())
    (script,) = pull_scripts(next(d for d in config["deployments"] if d["name"] == deployment), config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    printed = subprocess.run([*shlex.split(script), "PRINT=1", "--no-print-directory"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    ran = [line.split()[1:] for line in printed if line.endswith(tuple(" ".join(d) for d in doctors))
           and "/bin/titanflow doctor --target trn2 " in line]
    assert ran == [["doctor", "--target", "trn2", *d] for d in doctors], printed[-4:]
    if deployment.startswith("moe"):
        assert default_weights("trn2", "moe") == "Qwen/Qwen3-30B-A3B" != default_weights("trn2", "native")


def _edited_copy(folder, old: str, new: str):
    """deployments/prefect.yaml copied into ``folder`` with ``old`` (which it holds) replaced by ``new``."""
    from titanflow.prefect_ops.deployments import PREFECT_YAML

    text = PREFECT_YAML.read_text()
    assert old in text
    copy = folder / "prefect.yaml"
    copy.write_text(text.replace(old, new))
    return copy


def test_a_trn2_deployment_with_another_scenario_s_pull_step_is_told(tmp_path):
    wrong = _edited_copy(tmp_path, "name: moe-trn2-random, pull: *pull_trn2_moe,",
                         "name: moe-trn2-random, pull: *pull_trn2_native,")
    assert check_prefect_yaml(wrong) == ["moe-trn2-random: pull scripts is ['make setup-trn2 SCENARIOS=native'], "
                                         "expected ['make setup-trn2 SCENARIOS=moe']"]


def test_prefect_yaml_is_written_whole_from_the_registries_byte_for_byte(tmp_path):
    """deployments/prefect.yaml, anchors, pull steps and comments included, is what
    `python -m titanflow.prefect_ops.deployments` writes from the registries (a new scenario, pool or init is one
    command away: `make goldens`); the writer mends a stale or missing copy whole."""
    from titanflow.prefect_ops.deployments import PREFECT_YAML, prefect_yaml_text, write_prefect_yaml

    assert PREFECT_YAML.read_text() == prefect_yaml_text()
    copy = tmp_path / "prefect.yaml"
    assert write_prefect_yaml(copy) is True and copy.read_text() == PREFECT_YAML.read_text()
    assert write_prefect_yaml(copy) is False  # already the writer's
    copy.write_text(PREFECT_YAML.read_text().replace("pull_trn2_moe:", "pull_trn2_gone:"))
    assert write_prefect_yaml(copy) is True and copy.read_text() == PREFECT_YAML.read_text()


def test_every_anchor_the_file_merges_is_one_it_defines():
    """Each pool has its anchors (<pool>_pool, scenario_<pool>, nightly_<pool>; a pool that installs its profile
    pull_<pool> and pull_<pool>_<scenario> for each scenario), each defined once; YAML refuses an alias of an anchor
    it has not read yet, so loading the file is the check that each is defined before it is used."""
    import re

    import yaml

    from titanflow.prefect_ops.deployments import PREFECT_YAML

    text = PREFECT_YAML.read_text()
    defined = re.findall(r"&([a-z0-9_]+)", text)
    assert len(defined) == len(set(defined)) and set(re.findall(r"\*([a-z0-9_]+)", text)) <= set(defined)
    for pool, (_, record) in WORK_POOLS.items():
        anchor = pool.replace("-", "_")
        wanted = {f"{anchor}_pool", f"scenario_{anchor}", f"nightly_{anchor}"}
        if record.install:
            wanted |= {f"pull_{anchor}", *(f"pull_{anchor}_{scenario}" for scenario in SCENARIOS)}
        assert wanted <= set(defined), pool
    assert yaml.safe_load(text)["deployments"]


def test_a_nightly_without_its_schedule_is_told(tmp_path):
    stale = _edited_copy(tmp_path, "name: nightly-cpu, schedules: *nightly_cron,", "name: nightly-cpu, schedules: [],")
    assert check_prefect_yaml(stale) == ["nightly-cpu: schedules is [], expected [{'cron': '0 2 * * *', "
                                         "'timezone': 'UTC'}]"]


def test_the_pull_step_is_the_install_profiles_and_only_a_pool_that_says_install_runs_it():
    """trn2's pool installs the trn2 profile (titan_cfg.profiles: make setup-trn2); trn2-cluster's pools run the same
    profile without an install step; cpu's profile has none (make setup takes no scenarios)."""
    from titanflow.prefect_ops.deployments import install_script

    assert {pool: record.install for pool, (_, record) in WORK_POOLS.items()} == {
        "cpu": False, "trn2": True, "trn2-cluster": False, "trn2-eks": False}
    assert install_script("trn2", ("moe",)) == TARGETS["trn2"]().install_profile.pull_script(("moe",)) == (
        "make setup-trn2 SCENARIOS=moe")
    assert install_script("trn2-cluster", ("moe",)) is None and install_script("cpu", ("moe",)) is None


def test_a_target_copied_with_its_work_pool_is_refused_naming_both(monkeypatch):
    """A second target that keeps the cpu target's pool would take over its deployments without a word."""
    from titan_cfg import targets
    from titan_cfg.targets import work_pools

    monkeypatch.setitem(targets.TARGETS, "cpu2", lambda: targets.cpu().model_copy(update={"name": "cpu2"}))
    with pytest.raises(ValueError, match="work_pools: targets cpu and cpu2 both name the work pool cpu; fix: give "
                                         "cpu2 its own pool, or work_pools={} for none"):
        work_pools()
