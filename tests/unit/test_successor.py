"""A profile's successor and the venvs of a canary's two sides (titanflow.successor): the committed profiles, the
``<p>-next`` folder, and each bad input refused before anything runs, naming the file or variable and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from titanflow.paths import REPO_ROOT
from titanflow.successor import (MAKEFILE_VENVS, canary_sides, successor_of, venv_of, venv_variable)


def _root(tmp_path: Path, *profiles: str, successor: dict[str, str] | None = None) -> Path:
    """A checkout with the folders ``profiles/<p>/`` and each ``successor`` file given."""
    for name in profiles:
        (tmp_path / "profiles" / name).mkdir(parents=True)
    for name, text in (successor or {}).items():
        (tmp_path / "profiles" / name / "successor").write_text(text)
    return tmp_path


def _venv(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").touch()
    return path


def test_the_lowest_lane_names_cpu_and_no_other_committed_profile_names_one():
    # profiles/cpu-lowest/successor: the lowest end of the ranges, then the newest (the tested canary)
    assert successor_of("cpu-lowest") == "cpu"
    assert successor_of("cpu") is None and successor_of("trn2") is None  # no profiles/trn2-next/ committed


def test_a_next_folder_is_the_successor_and_a_successor_file_comes_first(tmp_path):
    root = _root(tmp_path, "trn2", "trn2-next", "cpu", "cpu-lowest", successor={"cpu-lowest": "cpu\n"})
    assert successor_of("trn2", root) == "trn2-next"
    assert successor_of("cpu-lowest", root) == "cpu"  # the file, though no cpu-lowest-next exists


@pytest.mark.parametrize("text, wrong, fix", [
    ("cpu-newest\n", "names 'cpu-newest', which has no folder", "fix: create that profile"),
    ("cpu-lowest\n", "names 'cpu-lowest' itself", "fix: name the next stack's profile"),
    ("\n", "empty", "fix: write the successor's profile name"),
])
def test_a_bad_successor_file_is_refused_with_the_file_and_the_fix(tmp_path, text, wrong, fix):
    root = _root(tmp_path, "cpu", "cpu-lowest", successor={"cpu-lowest": text})
    with pytest.raises(ValueError) as err:
        canary_sides("cpu-lowest", environ={}, root=root)
    assert str(err.value).startswith(f"{root / 'profiles' / 'cpu-lowest' / 'successor'}: ")
    assert wrong in str(err.value) and fix in str(err.value)


def test_a_profile_without_a_folder_or_a_successor_is_refused_naming_both_ways_to_write_one(tmp_path):
    root = _root(tmp_path, "cpu", "trn2")
    with pytest.raises(ValueError, match=r"profile: 'trn3' has no folder .*; fix: pass one of cpu, trn2"):
        canary_sides("trn3", environ={}, root=root)
    with pytest.raises(ValueError) as err:
        canary_sides("trn2", environ={}, root=root)
    assert str(err.value) == (f"profile: 'trn2' names no successor; fix: write the successor's name in "
                              f"{root / 'profiles' / 'trn2' / 'successor'}, or create "
                              f"{root / 'profiles' / 'trn2-next'}/ with the next stack's pins")


def test_each_side_runs_in_its_venv_the_makefiles_or_the_variables(tmp_path):
    root = _root(tmp_path, "cpu", "cpu-lowest", "trn2", "trn2-next", successor={"cpu-lowest": "cpu"})
    _venv(root / ".venv")
    _venv(root / ".venv-lowest")
    pinned, successor = canary_sides("cpu-lowest", environ={}, root=root)
    assert (pinned.role, pinned.profile, pinned.python) == ("pinned", "cpu-lowest", str(root / ".venv-lowest/bin/python"))
    assert (successor.role, successor.profile, successor.venv) == ("successor", "cpu", str(root / ".venv"))
    # a Neuron release beside the DLAMI's venv: each named by its variable
    environ = {"TITANFLOW_VENV_TRN2": str(_venv(tmp_path / "dlami")), "TITANFLOW_VENV_TRN2_NEXT": str(_venv(tmp_path / "next"))}
    assert [s.venv for s in canary_sides("trn2", environ=environ, root=root)] == [str(tmp_path / "dlami"),
                                                                                   str(tmp_path / "next")]
    assert venv_variable("trn2-next") == "TITANFLOW_VENV_TRN2_NEXT"
    assert venv_of("trn2-next", {}, root)[0] == root / ".venv-trn2-next"  # unset: beside the Makefile's


def test_a_missing_venv_is_refused_with_the_command_that_builds_it(tmp_path):
    root = _root(tmp_path, "cpu", "cpu-lowest", successor={"cpu-lowest": "cpu"})
    _venv(root / ".venv")
    with pytest.raises(ValueError) as err:
        canary_sides("cpu-lowest", environ={}, root=root)
    assert str(err.value) == (f"TITANFLOW_VENV_CPU_LOWEST: the pinned profile 'cpu-lowest' has no venv at "
                              f"{root / '.venv-lowest'} ({root / '.venv-lowest/bin/python'} is missing); fix: make "
                              "setup-lowest, or set TITANFLOW_VENV_CPU_LOWEST to a venv of the cpu-lowest profile")


def test_two_profiles_in_one_venv_are_refused(tmp_path):
    root = _root(tmp_path, "cpu", "cpu-lowest", successor={"cpu-lowest": "cpu"})
    _venv(root / ".venv")
    with pytest.raises(ValueError, match="TITANFLOW_VENV_CPU: 'cpu' runs in the venv of 'cpu-lowest'"):
        canary_sides("cpu-lowest", environ={"TITANFLOW_VENV_CPU_LOWEST": str(root / ".venv")}, root=root)


def test_the_makefiles_venvs_are_the_ones_named_here():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^VENV\s*:= (\S+)$", makefile, re.M).group(1) == MAKEFILE_VENVS["cpu"][0]
    assert re.search(r"^LOWEST\s*:= (\S+)$", makefile, re.M).group(1) == MAKEFILE_VENVS["cpu-lowest"][0]
    assert re.search(r"^setup-lowest: \$\(LOWEST\)/.installed$", makefile, re.M)  # make setup-lowest builds it
    assert "\nsetup: $(STAMP)" in makefile  # make setup builds .venv
