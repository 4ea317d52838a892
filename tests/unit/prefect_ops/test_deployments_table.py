"""deployments/prefect.yaml and the flows' signatures against the registries they must follow."""

import inspect
import typing

from flows.nightly import qwen3_nightly
from flows.scenario import qwen3_scenario
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS
from titanflow.prefect_ops.deployments import WORK_POOLS, check_prefect_yaml, expected_deployments
from titanflow.run.params import INITS, ScenarioRun


def test_prefect_yaml_holds_every_scenario_x_target_x_init_and_a_nightly_per_target():
    assert check_prefect_yaml() == []
    rows = expected_deployments()
    # 3 scenarios x 2 targets with a work pool x 2 inits, plus nightly-cpu and nightly-trn2
    assert len(rows) == len(SCENARIOS) * len(WORK_POOLS) * len(INITS) + len(WORK_POOLS) == 14
    assert set(WORK_POOLS) <= set(TARGETS)


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
