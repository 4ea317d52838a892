"""A bisect's result as the table, markdown and text it is shown in (titanflow.report.bisect), and its row in the
history folder (titanflow.bisect.record), from a bisect of a scratch chain with probes answered by judged runs
(helpers/bisect_runs.py; the search itself: test_bisect_search.py)."""

import datetime
import json

import pandas as pd
import pytest
from helpers.bisect_runs import chain, git, judged_summary, planted_losses, probe_run, scratch_repo

from titanflow.bisect.probe import BisectFolder
from titanflow.bisect.record import BISECT_TABLE, append_bisect, read_bisects
from titanflow.bisect.search import bisect_range, check_inputs, new_result
from titanflow.record.history import append_rows, read_history
from titanflow.report.bisect import artifact_name, bisect_markdown, bisect_text, headline, loss_curve, probe_rows

PLANT_AT, COMMITS = 3, 4


@pytest.fixture()
def result(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    hashes = [git(repo, "rev-parse", "HEAD"), *chain(repo, COMMITS, plant_at=PLANT_AT, plant={"lr.txt": "3e-3\n"})]

    def probe(revision, role):
        run_dir = tmp_path / "runs" / revision[:12]
        bad = hashes.index(revision) >= PLANT_AT
        return probe_run(revision, judged_summary(run_dir, planted_losses() if bad else None), run_dir)

    parameters = {"scenario": "hf_backend", "target": "cpu", "init": "random"}
    found = bisect_range(new_result(check_inputs(repo, hashes[0], hashes[-1], parameters),
                                    BisectFolder(tmp_path / "bisect-x")), probe)
    found.finished_at = found.started_at + datetime.timedelta(seconds=312)
    return found, hashes


def test_the_loss_curve_cell_shows_steps_1_2_and_the_last():
    assert loss_curve([11.94006, 11.93394, 11.89889, 11.62677]) == "11.94006, 11.93394 ... 11.62677 (4 steps)"
    assert loss_curve([11.94006]) == "11.94006 (1 step)"
    assert loss_curve([]) == "-"


def test_the_table_has_a_row_per_probe_in_order(result):
    found, hashes = result
    rows = probe_rows(found)
    assert [(r["revision"], r["probe"], r["verdict"]) for r in rows[:2]] == [
        (hashes[-1][:12], "bad endpoint", "bad"), (hashes[0][:12], "good endpoint", "good")]
    assert [r["#"] for r in rows] == list(range(1, len(found.probes) + 1))
    (bad_step,) = [r for r in rows if r["revision"] == hashes[PLANT_AT][:12]]
    assert (bad_step["subject"], bad_step["verdict"], bad_step["class"], bad_step["checks"]) == (
        f"plant {PLANT_AT}", "bad", "numerics", "golden_curve losses")
    assert bad_step["loss curve"].startswith("11.94006, 11.90538 ... ")


def test_headline_markdown_and_text_say_what_was_found(result):
    found, hashes = result
    line = headline(found)
    assert line == (f"bisect hf_backend-cpu-random {hashes[0][:12]}..{hashes[-1][:12]} ({COMMITS} commits): first bad "
                    f"commit {hashes[PLANT_AT][:12]} \"plant {PLANT_AT}\" fails golden_curve losses (numerics); "
                    f"{found.steps_taken} bisect probe(s) (at most ceil(log2(4)) = 2 without skips) + 2 endpoint "
                    "probe(s)")
    markdown = bisect_markdown(found)
    assert markdown.startswith(f"# {line}\n") and f"First bad commit `{hashes[PLANT_AT]}`" in markdown
    assert "| # | revision | subject | probe | verdict | class | checks | loss curve | s | flow run |" in markdown
    assert "git bisect replay" in markdown and "Wall time 312 s" in markdown
    text = bisect_text(found)
    assert text.splitlines()[0] == line and f"first bad commit {hashes[PLANT_AT]}:\n    plant {PLANT_AT}" in text
    assert artifact_name(found) == "bisect-hf-backend-cpu-random"  # Prefect keys: lowercase letters and dashes


def test_the_bisect_is_recorded_beside_the_runs_and_out_of_their_way(result, tmp_path):
    found, hashes = result
    history = tmp_path / "history"
    append_rows([{"run_id": "r1", "verdict": "pass", "finished_at": pd.Timestamp("2026-12-01", tz="UTC"),
                  "losses": [1.0]}], history)
    table = append_bisect(found, history)
    assert table == history / BISECT_TABLE
    append_bisect(found, history)  # the same bisect again replaces its row
    rows = read_bisects(history)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row.status, row.first_bad, row.first_bad_subject, row.failure_class, row.check) == (
        "found", hashes[PLANT_AT], f"plant {PLANT_AT}", "numerics", "golden_curve losses")
    assert (row.probes, row.bisect_probes, row.commits, row.wall_s) == (len(found.probes), found.steps_taken, 4, 312.0)
    probes = json.loads(row.probe_table)
    assert [p["verdict"] for p in probes] == [p.verdict for p in found.probes]
    # the runs' table and a read of the whole folder see the runs only
    assert list(read_history(history_dir=history).run_id) == ["r1"]
    assert list(pd.read_parquet(history).run_id) == ["r1"]
