"""The bisect without training (titanflow.bisect.search): a scratch chain of 8 commits after good, number 5
planted, and probes that answer with runs judged by titanflow's own rules (helpers/bisect_runs.py): the passing
10-step native run before the plant, the same run at lr 3e-3, as measured, from it on."""

import math

import pytest
from helpers.bisect_runs import chain, git, judged_summary, planted_losses, probe_run, scratch_repo

from titanflow.bisect.probe import BisectFolder
from titanflow.bisect.search import bisect_range, check_inputs, new_bisect_id, new_result
from titanflow.bisect.verdict import Check

PLANT_AT, COMMITS = 5, 8
PARAMETERS = {"scenario": "native", "target": "cpu", "init": "random"}


@pytest.fixture()
def chained(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    hashes = [git(repo, "rev-parse", "HEAD"),
              *chain(repo, COMMITS, plant_at=PLANT_AT, plant={"params.txt": "lr 3e-3\n"})]
    return repo, hashes


def bisect(tmp_path, repo, hashes, outcome):
    """bisect_range over hashes[0]..hashes[-1]; ``outcome(index)`` is "pass", "planted" or "crash". Returns the
    result and the (index, role) of each probe in order."""
    calls = []

    def probe(revision, role):
        index = hashes.index(revision)
        calls.append((index, role))
        run_dir = tmp_path / "runs" / revision[:12]
        kind = outcome(index)
        if kind == "crash":
            return probe_run(revision, None, run_dir, why="exit 1; last lines:\nImportError: boom")
        return probe_run(revision, judged_summary(run_dir, planted_losses() if kind == "planted" else None), run_dir)

    folder = BisectFolder(tmp_path / "bisect")
    result = new_result(check_inputs(repo, hashes[0], hashes[-1], PARAMETERS), folder)
    return bisect_range(result, probe), calls


def planted(index):
    return "planted" if index >= PLANT_AT else "pass"


def test_the_planted_commit_is_found_in_log2_n_probes(chained, tmp_path):
    repo, hashes = chained
    result, calls = bisect(tmp_path, repo, hashes, planted)
    assert result.status == "found" and result.first_bad == hashes[PLANT_AT]
    assert result.first_bad_message == f"plant {PLANT_AT}"
    assert result.check == Check(failure_class="numerics", check="golden_curve losses")
    assert result.commits == COMMITS and result.steps_bound == math.ceil(math.log2(COMMITS)) == 3
    assert calls[:2] == [(COMMITS, "bad"), (0, "good")]
    assert result.steps_taken == len(calls) - 2 == 3
    # each probe's verdict is what the plant implies
    assert [(p.revision, p.verdict) for p in result.probes] == [
        (hashes[i], "bad" if i >= PLANT_AT else "good") for i, _ in calls]
    assert all(p.losses[1] == (11.90538 if p.verdict == "bad" else 11.93394) for p in result.probes)
    assert f"# first bad commit: [{hashes[PLANT_AT]}] plant {PLANT_AT}" in result.bisect_log
    assert not (tmp_path / "bisect" / "worktrees" / "bisect-state").exists()


def test_a_crashed_probe_is_skipped_and_the_plant_still_found(chained, tmp_path):
    repo, hashes = chained
    result, calls = bisect(tmp_path, repo, hashes, lambda i: "crash" if i == PLANT_AT + 1 else planted(i))
    assert result.status == "found" and result.first_bad == hashes[PLANT_AT]
    (skipped,) = [p for p in result.probes if p.verdict == "skip"]
    assert skipped.revision == hashes[PLANT_AT + 1] and skipped.reason.endswith("ImportError: boom")
    assert skipped.failure_class is None and skipped.checks == []


def test_a_bad_revision_that_passes_refuses_before_git_bisect(chained, tmp_path):
    repo, hashes = chained
    result, calls = bisect(tmp_path, repo, hashes, lambda i: "pass")
    assert result.status == "refused" and calls == [(COMMITS, "bad")]
    assert result.reason.startswith("bad: its run ended pass (")
    assert [p.verdict for p in result.probes] == ["good"] and result.check is None and result.bisect_log == ""


def test_a_good_revision_that_fails_the_same_check_is_refused(chained, tmp_path):
    repo, hashes = chained
    result, calls = bisect(tmp_path, repo, hashes, lambda i: "planted")
    assert result.status == "refused" and calls == [(COMMITS, "bad"), (0, "good")]
    assert result.reason == (f"good: {hashes[0][:12]} fails the same check as bad {hashes[-1][:12]} (golden_curve "
                             "losses (numerics)); fix: pass an older good revision whose run passes")


def test_a_good_revision_that_crashes_is_refused(chained, tmp_path):
    repo, hashes = chained
    result, _ = bisect(tmp_path, repo, hashes, lambda i: "crash" if i == 0 else planted(i))
    assert result.status == "refused" and "did not pass (exit 1; last lines:" in result.reason
    assert [p.verdict for p in result.probes] == ["bad", "skip"]


def test_a_bad_revision_that_crashes_is_refused_with_its_row(chained, tmp_path):
    repo, hashes = chained
    result, calls = bisect(tmp_path, repo, hashes, lambda i: "crash")
    assert result.status == "refused" and calls == [(COMMITS, "bad")]
    assert result.reason.startswith("bad: its run ended without a summary.json (exit 1; last lines:")
    assert [(p.role, p.verdict) for p in result.probes] == [("bad", "skip")]


@pytest.mark.parametrize("parameters, message", [
    ({"steps": 0}, r"^steps: Input should be greater than or equal to 1"),
    ({"scenario": "dense"}, r"^scenario: unknown 'dense'"),
    ({"init": "warm"}, r"^init: Input should be 'random' or 'pretrained'"),
])
def test_bad_scenario_parameters_are_refused_before_any_probe(chained, parameters, message):
    repo, hashes = chained
    with pytest.raises(ValueError, match=message):
        check_inputs(repo, hashes[0], hashes[-1], PARAMETERS | parameters)


def test_bisect_ids_name_the_workload_and_sort_by_time():
    first = new_bisect_id(PARAMETERS)
    assert first.startswith("bisect-native-cpu-random-") and len(first.split("-")) == 7
