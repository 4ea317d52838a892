"""A trn2 run's gate (titanflow/run/preflight.py): titanflow doctor's checks (titanflow.run.checks), less the weights,
refuse it before anything runs."""

import pytest

from titanflow.params import ScenarioRun
from titanflow.run import checks, preflight


def test_a_trn2_run_is_refused_before_anything_runs(tmp_path):
    """titanflow.run.preflight runs the doctor's checks (less the weights) for trn2 launches only."""
    with pytest.raises(ValueError) as refused:
        preflight.preflight(ScenarioRun(scenario="moe", target="trn2", runs_dir=str(tmp_path)))  # moe takes rope=neuron
    message = str(refused.value)
    assert message.startswith("target: trn2 is not ready on this machine (`titanflow doctor --target trn2`")
    assert "FAIL  kernel rope=neuron: torch_neuronx is not installed" in message and "FAIL  weights" not in message
    assert preflight.preflight(ScenarioRun(target="trn2", runs_dir=str(tmp_path)), launch=False).parent == tmp_path


def test_a_run_on_trn2_is_refused_for_a_missing_upstream_name_only_once_everything_else_holds(monkeypatch):
    """require_ready (a trn2 run's preflight) resolves the upstream names (seconds, a Python of their own) only when
    every other check passed, so a machine that is no trn2 node is refused at once; then a missing name refuses it."""
    calls = []
    failing = checks.Check("upstream names", False, "lacks torchtitan.models.qwen3._qwen3_norm (gone)", "adapt it")
    monkeypatch.setattr(preflight, "check_upstream", lambda target, scenario: calls.append((target, scenario)) or failing)
    run = ScenarioRun(scenario="native", target="trn2")
    monkeypatch.setattr(preflight, "run_checks", lambda *a, **k: [checks.Check("python", False, "3.11", "use 3.12")])
    with pytest.raises(ValueError, match="python"):
        preflight.require_ready(run)
    assert calls == []
    monkeypatch.setattr(preflight, "run_checks", lambda *a, **k: [checks.Check("python", True, "3.12", "")])
    with pytest.raises(ValueError, match=r"upstream names: lacks torchtitan.models.qwen3._qwen3_norm"):
        preflight.require_ready(run)
    assert calls == [("trn2", "native")]


def test_a_history_folder_that_is_a_file_is_refused_before_launch_and_a_render_does_without_it(tmp_path, monkeypatch):
    """The judge reads the node's baselines from the history folder and the run is appended there: a file in its
    place is refused before anything trains, naming the variable and the fix; a render (files only) never reads it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TITANFLOW_HISTORY", str(blocker))
    run = ScenarioRun(scenario="native", target="cpu", runs_dir=str(tmp_path / "runs"))
    with pytest.raises(ValueError, match=rf"^TITANFLOW_HISTORY: {blocker} is a file, not a folder; fix: export "
                                         r"TITANFLOW_HISTORY=<a folder you can write>"):
        preflight.preflight(run)
    assert preflight.preflight(run, launch=False).parent == tmp_path / "runs"


def test_a_run_folder_another_run_of_the_same_id_made_after_the_preflight_is_refused_and_left_alone(tmp_path,
                                                                                                    monkeypatch):
    """Two runs of one --run-id started together both pass the preflight; the one that finds the folder made is
    refused naming the run id (titanflow.run.session.prepare), and the other run's folder keeps what it holds."""
    from titanflow.run import session

    taken = tmp_path / "runs" / "same"
    monkeypatch.setattr(session, "preflight", lambda run: taken)  # the preflight saw no folder; now there is one
    taken.mkdir(parents=True)
    (taken / "train.log").write_text("the other run's log\n")
    with pytest.raises(ValueError, match=rf"^run_id: {taken} was made by another run a moment ago; fix: pass another"):
        session.prepare({"scenario": "native", "target": "cpu", "run_id": "same", "runs_dir": str(tmp_path / "runs")})
    assert (taken / "train.log").read_text() == "the other run's log\n"
