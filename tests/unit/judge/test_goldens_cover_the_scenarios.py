"""Every scenario record has the cpu golden loss curves its runs are judged against: random and pretrained init with
default parameters, and the walkthrough mode's random-init curve where the mode's spec applies (torchtitan's own
decoder). A new scenario fails here, naming the missing files, until ``make goldens`` records them
(tests/e2e/test_scenarios.py, tests/e2e/test_walkthrough_mode.py)."""

from titan_cfg.scenarios import SCENARIOS
from titanflow.judge.goldens import GOLDEN_DIR, RECORD_COMMAND, curve_path
from titanflow.params import INITS


def expected_curves() -> list[str]:
    """The file names of the cpu golden curves the scenario records call for."""
    names = [curve_path(name, "cpu", init).name for name in SCENARIOS for init in INITS]
    names += [curve_path(name, "cpu", "random", model_spec="walkthrough").name
              for name, scenario in SCENARIOS.items() if scenario.torchtitan_decoder]
    return names


def test_every_scenario_has_its_cpu_golden_curves():
    missing = [name for name in expected_curves() if not (GOLDEN_DIR / name).is_file()]
    assert missing == [], f"record them with {RECORD_COMMAND}"


def test_no_golden_curve_is_left_of_a_scenario_that_is_gone():
    assert sorted(p.name for p in GOLDEN_DIR.glob("*-cpu-*.curve.csv")) == sorted(expected_curves())
