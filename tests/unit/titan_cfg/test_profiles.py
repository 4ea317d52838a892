"""The install profiles' records (titan_cfg.profiles) against the files and commands they name, and the targets' work
pools (titan_cfg.targets.WorkPool) against the profiles they install."""

import re

import pytest

from titan_cfg.profiles import PROFILES
from titan_cfg.targets import TARGETS, WorkPool
from titanflow.paths import REPO_ROOT


def test_every_target_runs_a_profile_of_the_registry_and_every_profile_has_its_folder_and_make_command():
    assert {TARGETS[name]().profile for name in TARGETS} <= set(PROFILES)
    makefile_targets = set(re.findall(r"^([a-z0-9-]+):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE))
    for name, profile in PROFILES.items():
        record = profile()
        assert record.name == name
        assert (REPO_ROOT / "profiles" / name / "constraints.txt").is_file()
        assert (REPO_ROOT / "profiles" / name / ".python-version").is_file()
        make, target = record.command.split()
        assert make == "make" and target in makefile_targets
        assert record.install.startswith(record.command)


def test_the_fixes_doctor_names_are_the_profiles():
    """What titanflow doctor says to run for each profile (tests/unit/run/test_doctor.py holds doctor's output)."""
    cpu, trn2 = PROFILES["cpu"](), PROFILES["trn2"]()
    setup_trn2 = "make setup-trn2 (profiles/trn2/setup.sh) on the Neuron 2.33 DLAMI"
    assert (cpu.install, trn2.install) == ("make setup", setup_trn2)
    assert cpu.python_fix.format(python="3.11") == "make setup (creates .venv with Python 3.11)"
    assert trn2.python_fix.format(python="3.12") == f"{setup_trn2} (its venv is Python 3.12)"
    assert cpu.upstream_fix.format(fork="0.2.2+neuron.1") == ("install the torch and torchtitan of the target's "
                                                               "profile (make setup)")
    assert trn2.upstream_fix.format(fork="0.2.2+neuron.1") == (f"{setup_trn2} (the fork 0.2.2+neuron.1, torch-neuronx "
                                                                "and nkilib)")
    assert cpu.kernel_fix.format(modules="nkilib, torch_neuronx") == "install nkilib, torch_neuronx"
    assert trn2.kernel_fix.format(modules="nkilib") == f"{setup_trn2} (torch-neuronx, neuronx-cc with nki and nkilib)"


def test_the_pull_script_names_the_runs_scenarios_as_one_word():
    trn2 = PROFILES["trn2"]()
    assert trn2.pull_script(("moe",)) == "make setup-trn2 SCENARIOS=moe"
    assert trn2.pull_script(("native", "moe")) == 'make setup-trn2 "SCENARIOS=native moe"'
    with pytest.raises(ValueError, match="the cpu install profile has no pull step .*; fix: install=False"):
        PROFILES["cpu"]().pull_script(("moe",))


def test_a_target_is_refused_an_unknown_profile_and_a_pool_that_cannot_install_it():
    cpu = TARGETS["cpu"]()
    with pytest.raises(ValueError, match="cpu: no install profile 'gpu'"):
        cpu.model_validate({**cpu.model_dump(), "profile": "gpu"})
    with pytest.raises(ValueError, match="cpu: work pool cpu installs the cpu profile, which has no pull step"):
        cpu.model_validate({**cpu.model_dump(), "work_pools": {"cpu": {"install": True}}})
    assert TARGETS["trn2"]().work_pools["trn2"].install and TARGETS["trn2"]().install_profile.pull_step


def test_a_kubernetes_pool_needs_its_template_and_a_process_pool_takes_none():
    with pytest.raises(ValueError, match="a kubernetes work pool needs base job template file"):
        WorkPool(kind="kubernetes")
    with pytest.raises(ValueError, match="a process work pool takes no base job template file"):
        WorkPool(template="deployments/kubernetes/x.json")
