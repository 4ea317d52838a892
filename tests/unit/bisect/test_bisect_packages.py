"""The bisect over environments without training: the package sets of constraints files and of runs' recorded stacks,
their difference, the order the changes are applied in, the overlays' content key, bad input refused before any
probe (exit 2, the field and the fix), and the search over the changes with judged runs as its probes."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.bisect_runs import PASSING_RUN, commit, copy_tracked, git, judged_summary, planted_losses, probe_run
from helpers.local_wheels import env_file, planted_wheels

from titanflow.bisect.env_search import bisect_environments, check_env_inputs, new_env_result, pip_options
from titanflow.bisect.overlay import SITECUSTOMIZE, ensure_overlay, overlay_key, overlay_pins
from titanflow.bisect.packages import PackageChange, order_changes, package_changes, packages_at, read_env_file, \
    run_environment
from titanflow.bisect.probe import BisectFolder
from titanflow.cli import main
from titanflow.paths import REPO_ROOT

NATIVE = {"scenario": "native", "target": "cpu", "init": "random", "steps": 2}


def _change(name, before, after):
    return PackageChange(name=name, before=before, after=after)


# --- the order ---------------------------------------------------------------------------------------------------

def test_dependencies_come_before_their_dependents_then_names_and_removals_last():
    changes = package_changes({"torch": "2.12", "alpha": "1", "old": "3", "zeta": "1"},
                              {"torch": "2.13", "alpha": "2", "zeta": "2", "new": "1"})
    # by name: alpha, new, old, torch, zeta; alpha requires zeta, new requires torch (and a package outside the change)
    ordered = order_changes(changes, {"alpha": {"zeta", "numpy"}, "new": {"torch"}})
    assert [str(c) for c in ordered] == ["torch 2.12 -> 2.13", "+new 1", "zeta 1 -> 2", "alpha 1 -> 2", "-old 3"]
    assert order_changes(changes, {}) == sorted(ordered[:-1], key=lambda c: c.name) + ordered[-1:]  # by name alone


def test_a_cycle_is_broken_by_name_and_the_order_is_the_same_every_time():
    changes = [_change(n, "1", "2") for n in ("c", "b", "a")]
    requires = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert [c.name for c in order_changes(changes, requires)] == ["a", "b", "c"]
    assert order_changes(list(reversed(changes)), requires) == order_changes(changes, requires)


def test_environment_k_is_good_with_the_first_k_changes():
    changes = [_change("b", "1", "2"), _change("c", None, "1"), _change("a", "1", None)]
    good = {"a": "1", "b": "1"}
    assert [packages_at(good, changes, k) for k in range(4)] == [
        {"a": "1", "b": "1"}, {"a": "1", "b": "2"}, {"a": "1", "b": "2", "c": "1"}, {"b": "2", "c": "1"}]


# --- two runs' recorded stacks ------------------------------------------------------------------------------------

def _run_with_stack(folder: Path, distributions: dict | None) -> Path:
    shutil.copytree(PASSING_RUN, folder)
    data = json.loads((folder / "summary.json").read_text())
    data["run_id"] = folder.name
    if distributions is not None:
        data["stack"] = {"distributions": distributions, "digest": "0" * 12, "sources": {}, "system": {}}
    (folder / "summary.json").write_text(json.dumps(data))
    return folder


def test_the_difference_of_two_recorded_stacks(tmp_path):
    good = _run_with_stack(tmp_path / "good-run", {"torch": "2.12.0", "Jinja2": "3.1.4", "nki": "0.1"})
    bad = _run_with_stack(tmp_path / "bad-run", {"torch": "2.13.0", "jinja2": "3.1.4", "neuronx-cc": "2.21"})
    (good_env, summary, folder), (bad_env, _, _) = (run_environment("good_run", "good-run", tmp_path),
                                                   run_environment("bad_run", str(bad), tmp_path))
    assert (summary.run_id, folder, good_env.label) == ("good-run", tmp_path / "good-run", "run good-run")
    assert [str(c) for c in package_changes(good_env.packages, bad_env.packages)] == [
        "+neuronx-cc 2.21", "-nki 0.1", "torch 2.12.0 -> 2.13.0"]  # Jinja2 and jinja2: one name (PEP 503), unchanged


# --- the content key ----------------------------------------------------------------------------------------------

def test_the_overlay_key_is_its_content(tmp_path):
    wheels = planted_wheels(tmp_path / "wheels")
    options = ["--no-index", "--find-links", str(wheels)]
    key = overlay_key({"planted-numerics": "1.0", "zeta-tools": "1.0"}, options)
    assert key == overlay_key({"zeta-tools": "1.0", "planted-numerics": "1.0"}, options)  # order is not content
    assert len({key, overlay_key({"planted-numerics": "1.1", "zeta-tools": "1.0"}, options),
                overlay_key({"planted-numerics": "1.0"}, options),
                overlay_key({"planted-numerics": "1.0", "zeta-tools": "1.0"}, options[:1])}) == 4
    (wheels / "zeta_tools-1.0-py3-none-any.whl").write_bytes(b"rebuilt")  # the same name, other bytes: a new key
    assert overlay_key({"planted-numerics": "1.0", "zeta-tools": "1.0"}, options) != key
    # what the overlay installs: only what differs from the base
    assert overlay_pins({"torch": "2.13.0", "zeta-tools": "2.0"}, {"torch": "2.13.0"}) == {"zeta-tools": "2.0"}


def test_an_overlay_is_built_once_and_its_pth_runs_at_start(tmp_path):
    wheels = planted_wheels(tmp_path / "wheels")
    options = ["--no-index", "--find-links", str(wheels)]
    folder = ensure_overlay({"planted-numerics": "1.1", "zeta-tools": "2.0"}, options, tmp_path / "cache")
    assert folder.parent == tmp_path / "cache" / "bisect-envs" and (folder / "sitecustomize.py").read_text() == \
        SITECUSTOMIZE
    stamp = (folder / ".installed").stat().st_mtime_ns
    assert ensure_overlay({"zeta-tools": "2.0", "planted-numerics": "1.1"}, options, tmp_path / "cache") == folder
    assert (folder / ".installed").stat().st_mtime_ns == stamp  # not built again
    started = subprocess.run([sys.executable, "-c", "import sys, planted_numerics as p; print(p.LR_SCALE, "
                              "any(type(f).__name__ == '_Finder' for f in sys.meta_path))"],
                             env={**os.environ, "PYTHONPATH": str(folder)}, capture_output=True, text=True, check=True)
    assert started.stdout.split() == ["300.0", "True"]  # imported by its .pth: the hook waits for torch.optim


# --- bad input, before any probe -------------------------------------------------------------------------------

@pytest.fixture()
def checkout(tmp_path):
    """A scratch repository of this checkout's files: its HEAD was installed in this venv (the same dependencies)."""
    repo = copy_tracked(REPO_ROOT, tmp_path / "repo")
    git(repo, "init", "-q")
    commit(repo, "titanflow as it is")
    return repo


@pytest.mark.parametrize("good_text, bad_text, message", [
    ("torch==2.13.0\nnot a requirement!\n", "torch==2.13.0\n", "good_env: {good} line 2 'not a requirement!' does "
                                                               "not parse as a requirement"),
    ("torch>=2.12\n", "torch==2.13.0\n", "good_env: {good} line 1 'torch>=2.12' is not pinned to one version; fix: "
                                         "write torch==<version>"),
    ("torch==2.13.0\n", "--pre\ntorch==2.13.0\n", "bad_env: {bad} line 1 '--pre': the option --pre is not one an "
                                                  "environment takes"),
    ("# nothing\n", "torch==2.13.0\n", "good_env: {good} pins no package; fix: write name==version lines"),
    ("torch==2.13.0\nTorch==2.12.0\n", "torch==2.13.0\n", "good_env: {good} line 2 'Torch==2.12.0' pins torch a second"),
    ("torch==2.13.0  # the cpu build\nnumpy==2.3.0\n", "numpy==2.3.0\ntorch==2.13.0\n", "bad: {bad} gives the same "
                                                                                      "package versions as good"),
])
def test_bad_environment_files_are_refused_naming_the_field(tmp_path, checkout, capsys, good_text, bad_text, message):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(good_text)
    bad.write_text(bad_text)
    assert main(["bisect", "native", "--repo", str(checkout), "--good-env", str(good), "--bad-env", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("titanflow: bad input:\n") and message.format(good=good, bad=bad) in err, err
    assert "fix: " in err


def test_a_run_without_a_stack_and_mixed_or_missing_sides_are_refused(tmp_path, checkout, capsys):
    old = _run_with_stack(tmp_path / "runs" / "old-run", None)  # the fixture predates the recorded stack
    good = env_file(tmp_path / "good.txt", tmp_path, {"torch": "2.13.0"})
    cases = [(["--good-run", str(old), "--bad-env", str(good)],
              f"good_run: the run old-run has no installed stack in {old / 'summary.json'}"),
             (["--good-run", "no-such-run", "--bad-env", str(good), "--runs-dir", str(tmp_path / "runs")],
              "good_run: 'no-such-run' is neither a run folder nor a run id"),
             (["--bad-env", str(good)], "good: pass one of --good-env FILE or --good-run RUN_ID"),
             (["--good-env", str(good), "--good-run", str(old), "--bad-env", str(good)], "good: pass one of"),
             (["--good", "HEAD", "--good-env", str(good), "--bad-env", str(good)],
              "good: --good/--bad (revisions) and --good-env"),
             (["--good", "HEAD"], "bad: missing; fix: pass --good REV --bad REV")]
    for argv, message in cases:
        assert main(["bisect", "native", "--repo", str(checkout), *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["old-run"]  # no bisect folder was made


def test_a_revision_not_installed_here_is_refused(tmp_path, checkout):
    (checkout / "profiles" / "cpu" / "constraints.txt").write_text("torch==1.0\n")
    commit(checkout, "another torch")
    good = env_file(tmp_path / "good.txt", tmp_path, {"zeta-tools": "1.0"})
    bad = env_file(tmp_path / "bad.txt", tmp_path, {"zeta-tools": "2.0"})
    with pytest.raises(ValueError, match=r"revision: 'HEAD' \([0-9a-f]{12}\) was not installed in this environment"):
        check_env_inputs(checkout, "HEAD", NATIVE, good_env=str(good), bad_env=str(bad))


# --- the search -----------------------------------------------------------------------------------------------------

def _runs(tmp_path):
    wheels = planted_wheels(tmp_path / "wheels")
    good = env_file(tmp_path / "good.txt", wheels, {"a-pkg": "1", "planted-numerics": "1.0", "zeta-tools": "1.0"})
    bad = env_file(tmp_path / "bad.txt", wheels, {"a-pkg": "2", "b-pkg": "1", "planted-numerics": "1.1",
                                                  "zeta-tools": "2.0"})
    return good, bad


def _fake_probe(tmp_path, result, bad_from: int, skip: set[int] = frozenset()):
    """Probes of environment k: the measured lr-3e-3 run from change ``bad_from`` on (1-based), a pass before it, a
    run without a summary for k in ``skip``; the ks probed, in order, in ``probe.asked``."""
    def probe(k, role):
        probe.asked.append(k)
        run_dir = tmp_path / "probes" / f"env-{k}"
        if k in skip:
            return probe_run(f"env-{k}", None, run_dir, why="crashed")
        return probe_run(f"env-{k}", judged_summary(run_dir, planted_losses() if k >= bad_from else None), run_dir)
    probe.asked = []
    return probe


def test_the_search_names_the_change_in_log2_n_probes(tmp_path, checkout):
    good, bad = _runs(tmp_path)
    inputs = check_env_inputs(checkout, "HEAD", NATIVE, good_env=str(good), bad_env=str(bad))
    assert [str(c) for c in inputs.changes] == ["a-pkg 1 -> 2", "+b-pkg 1", "planted-numerics 1.0 -> 1.1",
                                                "zeta-tools 1.0 -> 2.0"]
    assert pip_options(inputs) == ["--no-index", "--find-links", str(tmp_path / "wheels")]  # both sides', once
    result = new_env_result(inputs, BisectFolder(tmp_path / "bisect"))
    probe = _fake_probe(tmp_path, result, bad_from=3)
    bisect_environments(result, probe)
    assert (result.status, result.first_bad) == ("found", _change("planted-numerics", "1.0", "1.1"))
    assert probe.asked == [4, 0, 2, 3] and result.steps_taken == result.steps_bound == 2  # ceil(log2(4))
    assert [p.subject for p in result.probes] == ["4 changes, the last zeta-tools 1.0 -> 2.0", "good",
                                                  "2 changes, the last +b-pkg 1",
                                                  "3 changes, the last planted-numerics 1.0 -> 1.1"]


def test_skipped_environments_leave_the_changes_they_cover(tmp_path, checkout):
    good, bad = _runs(tmp_path)
    result = new_env_result(check_env_inputs(checkout, "HEAD", NATIVE, good_env=str(good), bad_env=str(bad)),
                            BisectFolder(tmp_path / "bisect"))
    probe = _fake_probe(tmp_path, result, bad_from=3, skip={2})
    bisect_environments(result, probe)
    assert result.status == "ambiguous" and probe.asked == [4, 0, 2, 1, 3]
    assert [c.name for c in result.candidates] == ["b-pkg", "planted-numerics"]


def test_two_runs_keep_their_verdicts_and_are_not_probed_again(tmp_path, checkout):
    stack = {"torch": "2.13.0", "zeta-tools": "1.0", "planted-numerics": "1.0"}
    good = _run_with_stack(tmp_path / "runs" / "good-run", stack)
    bad = _run_with_stack(tmp_path / "runs" / "bad-run", {**stack, "zeta-tools": "2.0", "planted-numerics": "1.1"})
    data = json.loads((bad / "summary.json").read_text())
    failed = judged_summary(tmp_path / "judged", planted_losses()).model_dump(mode="json")
    (bad / "summary.json").write_text(json.dumps({**failed, "run_id": "bad-run", "stack": data["stack"]}))
    inputs = check_env_inputs(checkout, "HEAD", NATIVE, good_run="good-run", bad_run="bad-run",
                              runs_dir=tmp_path / "runs")
    result = new_env_result(inputs, BisectFolder(tmp_path / "bisect"))
    probe = _fake_probe(tmp_path, result, bad_from=2)
    bisect_environments(result, probe)
    assert probe.asked == [1]  # the endpoints' verdicts are the runs'
    assert [(p.role, p.run_id, p.verdict) for p in result.probes[:2]] == [("bad", "bad-run", "bad"),
                                                                          ("good", "good-run", "good")]
    assert (result.status, str(result.first_bad)) == ("found", "zeta-tools 1.0 -> 2.0")


def test_a_file_is_this_venv_with_its_pins_so_it_compares_with_a_run(tmp_path, checkout):
    from titanflow.bisect.overlay import base_packages

    venv = base_packages()
    good = _run_with_stack(tmp_path / "runs" / "good-run", venv)  # a run of this venv, as its summary records it
    bad = env_file(tmp_path / "bad.txt", tmp_path, {"zeta-tools": "2.0", "torch": venv["torch"]})
    inputs = check_env_inputs(checkout, "HEAD", NATIVE, good_run=str(good), bad_env=str(bad))
    assert inputs.changes == [_change("zeta-tools", None, "2.0")]  # torch pinned at the venv's version: no change


def test_a_constraints_file_reads_its_pins_and_sources(tmp_path):
    path = tmp_path / "envs" / "tonight.txt"
    path.parent.mkdir()
    path.write_text("# pip freeze, tonight\n--no-index\n--find-links=../wheels\n-f https://example.invalid/simple\n"
                    "Torch==2.13.0  # the cpu build\nzeta_tools==2.0\nnki==0.1; sys_platform == 'nowhere'\n")
    env = read_env_file("bad_env", path)
    assert env.packages == {"torch": "2.13.0", "zeta-tools": "2.0"}  # PEP 503 names; a marker that is false: not here
    assert env.pip_options == ["--no-index", "--find-links", str(tmp_path / "wheels"), "-f",
                               "https://example.invalid/simple"]


def test_pip_freeze_of_titanflows_own_venv_is_taken_without_titanflows_line(tmp_path):
    """pip freeze of the venv titanflow is installed in lists its checkout (editable, a VCS url or a local url): every
    probe runs the bisect's --revision, so that line is left out; another package's editable checkout has no
    version to install and is refused with the fix."""
    path = tmp_path / "freeze.txt"
    path.write_text("-e git+file:///work/main@88ba699#egg=titanflow\nfilelock==3.13.1\n"
                    f"-e {REPO_ROOT}\ntitanflow @ file:///work/main\npandas==2.2.3\n")
    assert read_env_file("good_env", path).packages == {"filelock": "3.13.1", "pandas": "2.2.3"}
    path.write_text("filelock==3.13.1\n-e git+https://example.org/x.git@abc#egg=tool\n")
    with pytest.raises(ValueError, match=rf"^good_env: {path} line 2 '-e git\+https://example.org/x.git@abc#egg=tool': an "
                                         r"editable install is a checkout, not a version; fix: pin the package"):
        read_env_file("good_env", path)
