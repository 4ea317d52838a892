"""The qwen3-bisect flow's wiring on a temporary Prefect server, its probes answered by judged runs instead of
trainings (helpers/bisect_runs.py; the real probes: tests/e2e/test_bisect_runs.py): what it reports, records
and ends with."""

import pandas as pd
import pytest
from helpers.bisect_runs import chain, git, judged_summary, planted_losses, probe_run, scratch_repo
from helpers.prefect_harness import artifacts_of

from titanflow.bisect.record import read_bisects
from titanflow.bisect.search import BisectResult

PLANT_AT, COMMITS = 2, 4


@pytest.fixture()
def chained(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    return repo, [git(repo, "rev-parse", "HEAD"), *chain(repo, COMMITS, plant_at=PLANT_AT, plant={"lr": "3e-3\n"})]


def fake_probe(tmp_path, hashes, bad_from):
    """A stand-in for the probe task: the run of a revision at or after ``bad_from`` is the measured one at lr 3e-3."""
    def probe(repo, revision, folder, parameters, scenario_flow, api_url, timeout_s):
        assert scenario_flow.name == "qwen3-scenario" and api_url.startswith("http")
        run_dir = tmp_path / "runs" / revision[:12]
        bad = hashes.index(revision) >= bad_from
        return probe_run(revision, judged_summary(run_dir, planted_losses() if bad else None), run_dir)
    return probe


def test_a_found_bisect_completes_and_is_reported_and_recorded(prefect_server, chained, tmp_path, monkeypatch):
    from titanflow.flows import bisection

    repo, hashes = chained
    monkeypatch.setattr(bisection, "probe", fake_probe(tmp_path, hashes, PLANT_AT))
    state = bisection.qwen3_bisect(good=hashes[0], bad="HEAD", repo=str(repo), runs_dir=str(tmp_path / "b"),
                                   bisect_id="bisect-found", return_state=True)
    assert state.name == "Completed", state.message
    result = BisectResult.model_validate_json((tmp_path / "b" / "bisect-found" / "bisect.json").read_text())
    assert result.status == "found" and result.first_bad == hashes[PLANT_AT] and result.bad == hashes[-1]
    assert state.message.startswith("bisect native-cpu-random ") and f"first bad commit {hashes[PLANT_AT][:12]}" \
        in state.message
    artifact = artifacts_of(result.flow_run_id)["bisect-native-cpu-random"]
    assert artifact.type == "markdown" and f"First bad commit `{hashes[PLANT_AT]}`" in artifact.data
    assert (tmp_path / "b" / "bisect-found" / "bisect.md").read_text() == artifact.data
    (row,) = read_bisects().query("bisect_id == 'bisect-found'").itertuples()
    assert (row.status, row.first_bad, row.flow_run_id) == ("found", hashes[PLANT_AT], result.flow_run_id)


def test_a_refused_bisect_fails_saying_why_and_is_recorded(prefect_server, chained, tmp_path, monkeypatch):
    from titanflow.flows import bisection

    repo, hashes = chained
    monkeypatch.setattr(bisection, "probe", fake_probe(tmp_path, hashes, COMMITS + 1))  # nothing fails
    state = bisection.qwen3_bisect(good=hashes[0], bad=hashes[-1], repo=str(repo), runs_dir=str(tmp_path / "b"),
                                   bisect_id="bisect-refused", return_state=True)
    assert state.name == "Failed" and ": refused: bad: its run ended pass (" in state.message
    (row,) = read_bisects().query("bisect_id == 'bisect-refused'").itertuples()
    assert (row.status, row.probes, pd.isna(row.first_bad)) == ("refused", 1, True)


def test_bad_input_fails_before_any_probe(prefect_server, chained, tmp_path, monkeypatch):
    from titanflow.flows import bisection

    repo, hashes = chained
    monkeypatch.setattr(bisection, "probe", lambda *a: pytest.fail("probed"))
    state = bisection.qwen3_bisect(good=hashes[-1], bad=hashes[0], repo=str(repo), runs_dir=str(tmp_path / "b"),
                                   return_state=True)
    assert state.name == "Failed" and "good: " in state.message and "is not an ancestor of bad" in state.message
    assert not (tmp_path / "b").exists()
