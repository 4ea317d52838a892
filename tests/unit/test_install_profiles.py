"""The install profiles (profiles/, docs/install.md): `cpu` keeps today's exact stack and
can pull no other torch; `trn2` holds the walkthrough's pins, installs around the node's stack
without replacing any of it, and its PyPI packages resolve for Python 3.12.

The registry test asks PyPI (pip's resolver, dry run: nothing is downloaded past metadata, nothing
installed; about 40 s). What comes from elsewhere on the node (torch-neuronx, neuronx-cc, nki,
nkilib, the torchtitan-neuron fork, the DLAMI's torch) is listed in the profile, never resolved.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CPU, TRN2, LOWEST = ROOT / "profiles" / "cpu", ROOT / "profiles" / "trn2", ROOT / "profiles" / "cpu-lowest"
SETUP_TRN2 = TRN2 / "setup.sh"

#: Today's cpu stack (CI): torch 2.13.0 (the CPU wheel on these machines), torchtitan 0.3.0,
#: transformers 5.23.0, on Python 3.11.
CPU_STACK = {"torch": "==2.13.0", "torchtitan": "==0.3.0", "transformers": "==5.23.0"}

#: The walkthrough "Train Qwen3 on AWS Trainium with torchtitan", its set-up (as the issue and
#: shared/notes/qwen3-and-trainium.md quote it): Python 3.12, torch 2.14.0, torch-neuronx 2.14.3,
#: transformers 5.16.0, the torchtitan-neuron fork at release-2.33 installed as `torchtitan`.
WALKTHROUGH = {"torch": "2.14.0", "torch-neuronx": "2.14.3", "transformers": "5.16.0"}
WALKTHROUGH_PYTHON = "3.12"
WALKTHROUGH_FORK = ("https://github.com/aws-neuron/torchtitan-neuron.git", "release-2.33")

#: Every package of either stack: none may be a dependency of titanflow itself.
STACK = {"torch", "torchtitan", "transformers", "torch-neuronx", "neuronx-cc", "nki", "nkilib"}

#: The Neuron DLAMI's default user on Ubuntu; docs/install.md shows the commands with its home.
NODE_HOME = "/home/ubuntu"


def _requirements(path: Path) -> dict[str, Requirement]:
    """A requirements or constraints file of plain requirement lines (no options), by canonical name."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert not line.startswith("-"), f"{path.name}: option line {line!r}: profiles hold plain requirements only"
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = requirement
    return found


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _setup_trn2_print(**env: str) -> list[str]:
    proc = subprocess.run(["bash", str(SETUP_TRN2), "--print"], capture_output=True, text=True, check=True,
                          env={**os.environ, "HOME": NODE_HOME, **env})
    return proc.stdout.splitlines()


def test_cpu_profile_is_todays_stack_in_pyproject_and_constraints():
    constraints = _requirements(CPU / "constraints.txt")
    extra = {canonicalize_name(r.name): r for r in map(Requirement, _pyproject()["optional-dependencies"]["cpu"])}
    assert {name: str(constraints[name].specifier) for name in CPU_STACK} == CPU_STACK
    assert {name: str(r.specifier) for name, r in extra.items()} == CPU_STACK
    assert _requirements(LOWEST / "constraints.txt").keys() == constraints.keys()  # one stack, two ends


#: The dependencies the package states as ranges, tested at both ends: profiles/cpu pins the newest end exactly,
#: profiles/cpu-lowest the lowest (each range's lower bound).
RANGED = {"prefect", "prefect-kubernetes", "pandas", "pyarrow", "filelock", "psutil", "matplotlib"}


def test_the_package_states_ranges_and_the_two_profiles_pin_their_ends():
    project = _pyproject()
    stated = {canonicalize_name(r.name): r for r in map(Requirement, [*project["dependencies"],
                                                                       *project["optional-dependencies"]["test"]])}
    newest, lowest = _requirements(CPU / "constraints.txt"), _requirements(LOWEST / "constraints.txt")
    for name in RANGED:
        rng = stated[name].specifier
        assert not any(spec.operator == "==" for spec in rng), f"{name}: pyproject.toml pins {rng}; state a range"
        (bound,) = [spec.version for spec in rng if spec.operator == ">="]
        new, low = (next(iter(pins[name].specifier)) for pins in (newest, lowest))
        assert new.operator == low.operator == "==", name
        assert rng.contains(new.version) and rng.contains(low.version), (name, str(rng), new.version, low.version)
        assert low.version == bound, f"{name}: profiles/cpu-lowest pins {low.version}, the range starts at {bound}"
        assert Version(low.version) < Version(new.version), name


def test_pyproject_depends_on_no_part_of_either_stack_and_admits_both_pythons():
    names = {canonicalize_name(Requirement(line).name) for line in _pyproject()["dependencies"]}
    assert names & STACK == set()
    python = SpecifierSet(_pyproject()["requires-python"])
    assert python.contains("3.11.7") and python.contains("3.12.1")  # cpu's Python, the walkthrough's
    assert not python.contains("3.10.13") and not python.contains("3.13.0")  # neither profile's


def test_make_setup_installs_the_cpu_torch_alone_then_the_project_under_the_cpu_constraints(tmp_path):
    proc = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    installs = [line.split() for line in proc.stdout.splitlines() if "pip install" in line]
    assert len(installs) == 2, proc.stdout
    first, second = installs
    assert [a for a in first[first.index("install") + 1:] if not a.startswith("--")] == ["torch==2.13.0"]
    assert "torch" + CPU_STACK["torch"] == first[-1]
    assert second[second.index("-c") + 1] == "profiles/cpu/constraints.txt"
    assert second[-2:] == ["-e", "'.[cpu,test]'"]


def test_trn2_constraints_hold_the_walkthrough_pins_and_nothing_else():
    constraints = _requirements(TRN2 / "constraints.txt")
    assert set(constraints) == set(WALKTHROUGH)
    for name, version in WALKTHROUGH.items():
        assert constraints[name].specifier.contains(version), (name, constraints[name])
    assert constraints["torch-neuronx"].specifier.contains("2.14.3.0.1")  # the release family 2.14.3.0.*
    # exact enough that no other release of the stack fits
    assert not constraints["torch"].specifier.contains("2.14.1")
    assert not constraints["torch-neuronx"].specifier.contains("2.14.2.0")
    assert not constraints["torch-neuronx"].specifier.contains("2.14.4.0")
    assert str(constraints["transformers"].specifier) == "==5.16.0"


def test_trn2_requirements_are_registry_packages_within_the_constraints():
    constraints = _requirements(TRN2 / "constraints.txt")
    requirements = _requirements(TRN2 / "requirements.txt")
    assert requirements["transformers"].specifier == constraints["transformers"].specifier
    assert set(requirements) & (STACK - {"transformers"}) == set()  # torch & co never come from PyPI


def test_setup_trn2_installs_every_package_under_the_trn2_constraints():
    lines = _setup_trn2_print()
    check, *rest = lines
    assert check.startswith("/opt/aws_neuronx_venv_torch_neuronx_2_14_0/bin/python -c ")
    assert "(3, 12)" in check and WALKTHROUGH_PYTHON in check
    installs = [line for line in rest if " pip install " in line]
    assert len(installs) == 4
    assert all(" -c profiles/trn2/constraints.txt " in line for line in installs)
    repo, ref = WALKTHROUGH_FORK
    assert f"git clone --branch {ref} {repo} {NODE_HOME}/torchtitan-neuron" in rest
    # the Neuron packages only ever from the Neuron index, titanflow's own from PyPI alone
    neuron = [line for line in installs if "torch-neuronx" in line]
    assert len(neuron) == 1 and "--extra-index-url https://pip.repos.neuron.amazonaws.com" in neuron[0]
    assert installs[-1].endswith("-r profiles/trn2/requirements.txt -e .") and "--extra-index-url" not in installs[-1]
    assert rest[-2:] == ["/opt/aws_neuronx_venv_torch_neuronx_2_14_0/bin/python -m pip check",
                         "/opt/aws_neuronx_venv_torch_neuronx_2_14_0/bin/titanflow doctor --target trn2"]


def test_the_install_page_gives_the_commands_make_setup_trn2_runs():
    readme = (ROOT / "docs" / "install.md").read_text()
    section = readme.split("## On a trn2 node", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands == _setup_trn2_print(), "docs/install.md's trn2 commands differ from `make setup-trn2 PRINT=1`"


def test_setup_trn2_stops_before_any_install_on_another_python(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(glob.glob("/root/.pyenv/versions/3.11*/bin/python")[0])
    proc = subprocess.run(["bash", str(SETUP_TRN2)], check=False, capture_output=True, text=True,
                          env={**os.environ, "TITANFLOW_TRN2_VENV": str(venv)})
    assert proc.returncode == 1
    assert f"the trn2 profile needs {WALKTHROUGH_PYTHON}" in proc.stderr and "Python 3.11" in proc.stderr
    assert len(proc.stdout.splitlines()) == 1  # the check only: nothing was installed


@pytest.fixture(scope="module")
def python312() -> str:
    found = sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python"))
    assert found, "no Python 3.12 under /root/.pyenv/versions (the machine image ships 3.12.1)"
    return found[-1]


def test_trn2_registry_packages_resolve_for_python_312(python312):
    """pip's resolver on Python 3.12, PyPI only (no local pip configuration: the node has none of it),
    dry run: titanflow's dependencies plus profiles/trn2/requirements.txt under the trn2 constraints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    proc = subprocess.run(
        [python312, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-",
         "--disable-pip-version-check", "-c", str(TRN2 / "constraints.txt"), "-r", str(TRN2 / "requirements.txt"),
         *_pyproject()["dependencies"]],
        check=False, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["environment"]["python_version"] == WALKTHROUGH_PYTHON
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    assert resolved["transformers"] == WALKTHROUGH["transformers"]
    for line in _pyproject()["dependencies"]:  # every dependency of titanflow is met
        requirement = Requirement(line)
        assert requirement.specifier.contains(resolved[canonicalize_name(requirement.name)]), requirement
    pulled_stack = sorted(set(resolved) & (STACK - {"transformers"}))
    pulled_gpu = sorted(n for n in resolved if n.startswith("nvidia-") or n == "triton")
    assert pulled_stack == [] and pulled_gpu == [], "the registry install would replace the node's stack"


def test_installing_titanflow_into_a_venv_of_either_end_changes_none_of_its_packages():
    """``pip install -e .`` (no constraints, as a team would into its own venv) resolved by pip in dry-run mode in the
    venv running this test: the cpu venv (the newest end) or .venv-lowest (the lowest, make test-lowest runs this file
    too). pip would install titanflow alone: every range admits what is there."""
    import sys

    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--disable-pip-version-check", "-e",
                           str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("Would install")]
    assert re.fullmatch(r"Would install titanflow-[0-9.]+", line), line
