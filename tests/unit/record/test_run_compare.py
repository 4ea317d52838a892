"""titanflow compare: two runs side by side, from the committed run fixtures (tests/fixtures/README.md) and
history rows built by hand (tests/helpers/history_rows.py). The divergence of two real runs with different
learning rates is tests/e2e/test_compare_runs.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import FIXTURES
from helpers.history_rows import history_row

from titanflow.record.history import append_rows, read_history
from titanflow.record.run_compare import (
    compare,
    curve_margin,
    find_run,
    last_passing,
    step_pairs,
)
from titanflow.report.compare import comparison_markdown, comparison_text

LEGACY = FIXTURES / "legacy_run"  # runs.parquet: the row of run base-native (native cpu random, 10 steps)
RANDOM_RUN = FIXTURES / "run_folders" / "native-cpu-random"  # run native-a1: the same workload, not in a history
NAN_RUN = FIXTURES / "run_folders" / "native-cpu-nan"  # run native-nan2: lr 1e6, 4 steps, 2 logged


def test_margin_is_the_golden_curve_rules():
    assert curve_margin() == 0.02  # titanflow/judge/regression_rules.toml, metric losses


def test_a_history_run_against_a_run_folder_of_the_same_workload():
    runs = read_history(history_dir=LEGACY)
    a, b = find_run("base-native", runs), find_run(str(RANDOM_RUN), runs)
    assert (a["source"], b["source"]) == ("history", "run folder")
    c = compare(a, b)
    # both were `titanflow run native --target cpu` with default parameters: the same config_key and, on
    # one machine, the same curve bit for bit (11.94006 ... 11.62677)
    assert c.comparable and c.workload_a == c.workload_b == "native-cpu-random/efe6ba4c830a"
    assert c.divergence_step is None and c.largest_gap == 0.0
    assert [p.parted for p in c.steps] == [False] * 10
    metrics = {m.metric: m for m in c.metrics}
    assert (metrics["tokens_per_s"].a, metrics["tokens_per_s"].b) == (602.0, 454.0)  # each summary's
    assert metrics["tokens_per_s"].change == pytest.approx((454 - 602) / 602)
    assert (metrics["seconds_train"].a, metrics["seconds_train"].b) == (54.898, 41.505)
    # the legacy row was written before runs_dir was recorded and with a parity_router tolerance
    assert [(d.name, d.a, d.b) for d in c.parameters] == [("runs_dir", None, "/tmp/a-work/runs"),
                                                          ("tolerances.parity_router", 1.0, None)]
    # a run folder's summary of that age records no numerics environment: its versions are unknown
    assert [(d.name, d.a, d.b) for d in c.provenance][:3] == [("torch_version", "2.13.0+cpu", None),
                                                              ("torchtitan_version", "0.3.0", None),
                                                              ("transformers_version", "5.23.0", None)]
    assert c.headline().startswith("native-a1 (pass) vs base-native (pass): curves within 0.02 nats over 10 "
                                   "common steps (largest gap 0 nats)")


def test_a_nan_run_against_a_passing_one_lists_the_changed_parameters():
    runs = read_history(history_dir=LEGACY)
    c = compare(find_run("base-native", runs), find_run(str(NAN_RUN), runs))
    assert not c.comparable  # 4 steps against 10: another workload
    assert (c.verdict_b, c.failure_class_b) == ("fail", "numerics")
    assert [(d.name, d.a, d.b) for d in c.parameters] == [
        ("lr", 0.0008, 1e6), ("runs_dir", None, "/tmp/a-work/runs"), ("steps", 10, 4),
        ("tolerances.parity_router", 1.0, None)]
    assert c.steps[1].difference == pytest.approx(11.93121 - 11.93394)  # both metrics.csv files, step 2
    # the NaN run logged 2 steps; torchtitan stopped at step 3 ("Loss is not finite ... at step 3" in its error,
    # raised before the step is logged): a non-finite loss against a finite one parts
    assert [p.parted for p in c.steps] == [False, False, True] + [None] * 7
    assert c.divergence_step == 3 and math.isnan(c.steps[2].loss_b)
    markdown = comparison_markdown(c)
    assert "| 2 | 11.93394 | 11.93121 | -0.00273 |  |" in markdown
    assert "| parameter | lr | 0.0008 | 1000000.0 |" in markdown
    assert "not comparable: A is native-cpu-random/efe6ba4c830a, B is native-cpu-random/" in comparison_text(c)


def test_curves_part_at_the_first_step_beyond_the_margin():
    a = [11.94, 11.90, 11.85, 11.80, 11.75, math.nan, 11.70]
    b = [11.94, 11.91, 11.88, 11.70, math.nan, math.nan]
    pairs = step_pairs(a, b, 0.02)
    # step 2 differs by 0.01 (within), step 3 by 0.03 (out), 5: one loss not finite, 6: neither, 7: b has none
    assert [p.parted for p in pairs] == [False, False, True, True, True, False, None]
    c = compare(history_row("a", 1, losses=a), history_row("b", 2, losses=b))
    assert c.divergence_step == 3 and c.largest_gap == pytest.approx(0.1)  # step 4, the largest finite gap
    assert c.headline().startswith("b (pass) vs a (pass): curves part at step 3 (11.88 vs 11.85, |difference| > "
                                   "0.02 nats)")
    with pytest.raises(ValueError, match="margin: -1 nats"):
        compare(history_row("a", 1), history_row("b", 2), margin=-1)


def test_last_passing_is_the_latest_passing_run_of_the_same_workload_before_it(tmp_path):
    rows = [history_row("p1", 1), history_row("p2", 2), history_row("f0", 2, hour=12, verdict="fail"),
            history_row("other-steps", 2, hour=14, config_key="k3"),
            history_row("moe", 2, hour=16, scenario="moe"),
            history_row("f", 3, verdict="fail", failure_class="numerics", lr=3e-3, torch_version="2.14.0+cpu"),
            history_row("p3", 4)]
    append_rows(rows, tmp_path)
    runs = read_history(history_dir=tmp_path)
    assert last_passing(find_run("f", runs), runs)["run_id"] == "p2"
    assert last_passing(find_run("p1", runs), runs) is None
    c = compare(last_passing(find_run("f", runs), runs), find_run("f", runs))
    assert [(d.name, d.a, d.b) for d in c.parameters] == [("lr", 8e-4, 3e-3)]
    assert [(d.name, d.a, d.b) for d in c.provenance] == [("torch_version", "2.13.0+cpu", "2.14.0+cpu")]
    with pytest.raises(LookupError, match=r"run: 'nope' is neither a run_id of the history \(7 run\(s\)\) nor"):
        find_run("nope", runs, tmp_path / "runs")


def test_compare_command_prints_the_tables_and_writes_the_png(tmp_path, capsys):
    from titanflow.cli import main

    png = tmp_path / "pair.png"
    assert main(["compare", "base-native", str(NAN_RUN), "--history-dir", str(LEGACY), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("native-nan2 (fail) vs base-native (pass): curves part at step 3 (nan vs 11.89889, "
                          "|difference| > 0.02 nats)")
    assert "loss per step (nats):" in out and f"plot: {png}" in out
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert main(["compare", "base-native", "nope", "--history-dir", str(LEGACY), "--runs-dir", str(tmp_path)]) == 2
    assert "run: 'nope' is neither a run_id of the history (1 run(s))" in capsys.readouterr().err
    # a PNG path in a folder that does not exist: bad input naming --png, not a traceback
    assert main(["compare", "base-native", str(NAN_RUN), "--history-dir", str(LEGACY), "--png",
                 str(tmp_path / "absent" / "x.png")]) == 2
    assert f"png: {tmp_path / 'absent'} is not a folder" in capsys.readouterr().err


def test_a_rendered_run_folder_is_named_as_such_not_as_missing(tmp_path, capsys):
    """`titanflow render` writes <run>/job/ only: compare names the folder and why it cannot be compared, whether given
    the run folder or the job folder render prints; a folder with a train.log and no summary yet is told apart."""
    from titanflow.cli import main

    assert main(["render", "native", "--runs-dir", str(tmp_path / "runs")]) == 0
    job = Path(capsys.readouterr().out.strip())
    for ref in (job.parent, job):
        assert main(["compare", "base-native", str(ref), "--history-dir", str(LEGACY)]) == 2
        assert capsys.readouterr().err == (
            f"titanflow: bad input:\nrun: {job.parent} has no summary.json: only rendered (titanflow render: job/ holds "
            "the job files), never trained; fix: compare runs that trained (titanflow run), e.g. a run_id that `titanflow "
            "history --last 20` lists\n")
    (job.parent / "train.log").write_text("")
    with pytest.raises(LookupError, match=f"has a train.log but no summary.json yet: still running, or killed before the "
                                          f"flow wrote it \\(titanflow run --resume {job.parent.name} finishes it\\)"):
        find_run(job.parent.name, read_history(history_dir=LEGACY), tmp_path / "runs")
    assert sorted(p.name for p in job.parent.iterdir()) == ["job", "train.log"]  # no PNG


def test_a_run_without_a_loss_curve_is_refused_naming_it_and_no_png_is_written(tmp_path, capsys):
    """A run folder whose summary records no losses and that has no metrics.csv (it failed before training), and two
    history rows with empty curves: exit 2, each run named with what it lacks, nothing written."""
    import json
    import shutil

    from titanflow.cli import main
    from titanflow.record.run_compare import NoCurveError

    empty = tmp_path / "native-empty"
    shutil.copytree(RANDOM_RUN, empty, ignore=shutil.ignore_patterns("metrics.csv"))
    summary = json.loads((empty / "summary.json").read_text())
    (empty / "summary.json").write_text(json.dumps({**summary, "losses": []}))
    png = tmp_path / "pair.png"
    assert main(["compare", "base-native", str(empty), "--history-dir", str(LEGACY), "--png", str(png)]) == 2
    assert capsys.readouterr().err == (
        f"titanflow: bad input:\nrun: no loss curve to compare: native-a1 ({empty}): its summary.json records no losses "
        f"and {empty / 'metrics.csv'} is missing; fix: compare runs that logged at least one training step\n")
    assert not png.exists() and not list(empty.glob("compare-*.png"))
    with pytest.raises(NoCurveError) as refused:
        compare(history_row("a", 1, losses=[]), history_row("b", 2, losses=[], verdict="fail", failed_task="train"))
    assert str(refused.value) == ("run: no loss curve to compare: a: its history row records no losses; b: its history "
                                  "row records no losses; it failed in train; fix: compare runs that logged at least one "
                                  "training step")


def test_a_run_by_its_folder_is_its_history_row_when_the_history_has_it(tmp_path):
    """The same run by id and by folder gives the same row (the history's, with the provenance it recorded), so
    two spellings of one comparison agree; a folder the history lacks is read from its summary."""
    import shutil

    folder = tmp_path / "runs" / "native-a1"
    shutil.copytree(RANDOM_RUN, folder)
    summary = (folder / "summary.json").read_text()
    (folder / "summary.json").write_text(summary.replace(str(RANDOM_RUN), str(folder)))
    assert find_run(str(folder), read_history(history_dir=tmp_path / "empty"))["source"] == "run folder"
    from titanflow.record.history import row_from_summary

    row = row_from_summary(folder / "summary.json").as_record() | {"git_commit": "abc123"}
    append_rows([row], tmp_path / "history")
    runs = read_history(history_dir=tmp_path / "history")
    by_id, by_folder = find_run("native-a1", runs), find_run(str(folder), runs)
    assert by_folder == by_id and by_folder["source"] == "history" and by_folder["git_commit"] == "abc123"


def test_an_unreadable_history_is_said_and_the_runs_are_read_from_their_folders(tmp_path, capsys):
    """A history table that is not parquet: compare says so and compares the two run folders, which hold each run's
    record and curve (exit 0); a run_id only the history could name is then not found (exit 2)."""
    from titanflow.cli import main

    broken = tmp_path / "history"
    broken.mkdir()
    (broken / "runs.parquet").write_bytes(b"not a parquet file")
    png = tmp_path / "pair.png"
    assert main(["compare", str(RANDOM_RUN), str(NAN_RUN), "--history-dir", str(broken), "--png", str(png)]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("titanflow: the history cannot be read, so the runs are read from their folders: ")
    # the fix names the history given, not the default one
    assert f"start a new one: titanflow history --set-aside --history-dir {broken}" in captured.err
    assert captured.out.startswith("native-nan2 (fail) vs native-a1 (pass): curves part at step 3")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert main(["compare", "base-native", str(NAN_RUN), "--history-dir", str(broken), "--runs-dir", str(tmp_path)]) == 2
    assert "run: 'base-native' is neither a run_id of the history (0 run(s))" in capsys.readouterr().err


def test_compare_leads_with_the_packages_that_differ(tmp_path):
    """Two runs whose summary.json recorded their installed stacks, B's with another Prefect and pandas than this venv
    (as a run in the other lane's venv has): the comparison names those packages before the curves, in its headline
    and its first line."""
    from titanflow.judge.environment import installed_stack
    from titanflow.record.summary import RunSummary

    here = installed_stack()  # this venv's, as a run records it
    other = {"distributions": {**here["distributions"], "prefect": "3.0.0", "pandas": "2.0.0"}, "digest": "other"}
    rows = []
    for run_id, stack in (("a", here), ("b", other)):
        folder = tmp_path / run_id
        folder.mkdir()
        (folder / "summary.json").write_text(RunSummary(run_id=run_id, scenario="native", target="cpu",
                                                        init="random", steps=10, stack=stack).model_dump_json())
        rows.append(history_row(run_id, 5, run_dir=str(folder)))
    found = compare(*rows)
    changed = [f"pandas {here['distributions']['pandas']} -> 2.0.0", f"prefect {here['distributions']['prefect']} -> 3.0.0"]
    assert found.packages == changed
    assert found.headline().startswith("b (pass) vs a (pass): 2 package(s) differ; curves within")
    assert comparison_text(found).splitlines()[1] == "environment: 2 package(s) differ: " + ", ".join(changed)
