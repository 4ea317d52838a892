"""Which Python a probe runs with (titanflow.bisect.environment): the dependency key of a revision, the decision
to reuse this environment or build a venv, and the build's command. No venv is built here: that needs the
package index."""

import subprocess
import sys

import pytest
from helpers.bisect_runs import commit, git, scratch_repo

from titanflow import paths
from titanflow.bisect.environment import (
    EnvironmentPlan, EnvironmentUnavailable, dependency_key, ensure_environment, plan_environment,
)
from titanflow.bisect.revisions import file_at

PYPROJECT = '[project]\nname = "x"\nrequires-python = ">=3.11"\ndependencies = ["pandas>=2.2"]\n'
CONSTRAINTS = "# the cpu profile\ntorch==2.13.0\ntransformers==5.23.0\n"


@pytest.fixture()
def revisions(tmp_path):
    """A repository whose commits change the dependency files: {name: hash}."""
    repo = scratch_repo(tmp_path / "repo")
    files = {"pyproject.toml": PYPROJECT, "profiles/cpu/constraints.txt": CONSTRAINTS}
    found = {"base": commit(repo, "dependencies", files)}
    found["docs"] = commit(repo, "docs only", {"docs/a.md": "a\n"})
    found["comments"] = commit(repo, "comments and order", {
        "profiles/cpu/constraints.txt": "transformers==5.23.0   # pinned\n\n# torch first\ntorch==2.13.0\n",
        "pyproject.toml": "# the project\n" + PYPROJECT.replace('name = "x"', 'name = "x"  # its name')})
    found["pin"] = commit(repo, "transformers 5.24", {
        "profiles/cpu/constraints.txt": CONSTRAINTS.replace("5.23.0", "5.24.0")})
    found["dependency"] = commit(repo, "a dependency", {"pyproject.toml": PYPROJECT.replace(
        '"pandas>=2.2"', '"pandas>=2.2", "rich"')})
    return repo, found


def key(repo, revision):
    return dependency_key(lambda name: file_at(repo, revision, name))


def test_the_key_changes_with_what_is_installed_and_only_with_it(revisions):
    repo, found = revisions
    keys = {name: key(repo, revision) for name, revision in found.items()}
    assert keys["docs"] == keys["base"] == keys["comments"]  # pip reads no comment, nor the order of constraints
    assert len({keys["base"], keys["pin"], keys["dependency"]}) == 3
    assert key(repo, git(repo, "rev-parse", "HEAD~5")) not in keys.values()  # base: no dependency files at all


def test_the_same_key_reuses_this_python_and_another_plans_a_venv_under_the_cache(tmp_path):
    same = plan_environment("k1", current="k1", cache_root=tmp_path)
    assert (same.reused, same.python, same.install) == (True, sys.executable, None)
    assert same.describe() == "this environment (k1)"
    other = plan_environment("k2", current="k1", cache_root=tmp_path)
    venv = tmp_path / "bisect-envs" / "k2"
    assert (other.reused, other.venv, other.python) == (False, str(venv), str(venv / "bin" / "python"))
    assert other.install == ["make", "setup", f"VENV={venv}"]


def test_no_venv_is_built_for_trn2(tmp_path):
    plan = plan_environment("k2", target="trn2", current="k1", cache_root=tmp_path)
    assert plan.install is None
    with pytest.raises(EnvironmentUnavailable, match=r"^the revision's dependencies \(k2\) differ from this "
                                                     r"environment's .* builds venvs for the cpu profile only"):
        ensure_environment(plan, tmp_path)


def test_a_venv_with_its_stamp_is_reused_and_a_failed_build_is_said(tmp_path):
    venv = tmp_path / "bisect-envs" / "k2"
    plan = EnvironmentPlan(key="k2", reused=False, python=str(venv / "bin" / "python"), venv=str(venv),
                           install=["sh", "-c", "echo building; echo no index >&2; exit 3"])
    with pytest.raises(EnvironmentUnavailable, match=r"^sh -c .* failed in .*: building\nno index\n$"):
        ensure_environment(plan, tmp_path)
    (venv).mkdir(parents=True)
    (venv / ".installed").touch()  # the Makefile's stamp: the install completed
    assert ensure_environment(plan, tmp_path) == plan.python


def test_the_makefile_builds_the_venv_it_is_given():
    """``make -n``: the commands the install would run, none run. Every pip is the given venv's, and the project
    installs under the cpu profile's constraints."""
    venv = "/nonexistent/bisect-envs/k2"
    printed = subprocess.run(["make", "-n", "-B", "setup", f"VENV={venv}"], cwd=paths.REPO_ROOT, check=True,
                             capture_output=True, text=True).stdout
    pips = [line for line in printed.splitlines() if " install " in line]
    assert pips and all(line.startswith(f"{venv}/bin/pip install") for line in pips)
    assert any("-c profiles/cpu/constraints.txt -e '.[cpu,test]'" in line for line in pips)
    assert f"touch {venv}/.installed" in printed
