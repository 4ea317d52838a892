"""A node's baselines (titanflow.judge.baselines): a passed run promoted, then later runs of its workload on its
hardware judged on their whole curve against it by the golden_curve rule (titanflow.judge.regression), in the exact
lane at the rule's margin or, in another environment, the band lane at its band naming the packages that differ;
retired ones kept. The runs are history rows built by hand (tests/helpers/history_rows.py: the losses of a real
native cpu run); the rule's margin and band are the committed regression_rules.toml's."""

import json

import pandas as pd
import pytest
from helpers.history_rows import NATIVE_CPU_RANDOM_LOSSES, history_row

from titanflow.cli import main
from titanflow.judge import baselines
from titanflow.judge.regression import evaluate, load_rules

HARDWARE = "cpu: AMD EPYC, AVX512"
STACK = {"distributions": {"prefect": "3.9.1", "torch": "2.13.0+cpu"}, "digest": "aaaaaaaaaaaa"}
LOWEST = {"distributions": {"prefect": "3.9.0", "torch": "2.13.0+cpu"}, "digest": "bbbbbbbbbbbb"}
WEIGHTS = json.dumps({"scenario": "native", "target": "cpu", "init": "pretrained", "steps": 10,
                      "weights": "/data/my-qwen3"}, sort_keys=True)
RULE = next(r for r in load_rules().rules if r.kind == "golden_curve")


def run(run_id: str, losses=NATIVE_CPU_RANDOM_LOSSES, stack=STACK, **extra) -> dict:
    """A run of the user-weights workload on this hardware (no cpu golden applies to user weights)."""
    return history_row(run_id, 5, init="pretrained", losses=list(losses), parameters=WEIGHTS, hardware=HARDWARE,
                       environment_key="e1", stack_digest=stack["digest"], **extra)


def curve_finding(row: dict, history_dir, stack=STACK):
    (found,) = [f for f in evaluate(row, pd.DataFrame(), history_dir=history_dir, stack=stack) if f.metric == "losses"]
    return found


def test_without_a_baseline_the_finding_says_so_with_the_promote_command(tmp_path):
    found = curve_finding(run("first"), tmp_path)
    assert found.status == "no baseline"
    assert found.detail.endswith("no baseline on this node; make this run the baseline of its workload on this "
                                 "node: titanflow golden promote first")


def test_a_promoted_run_judges_the_next_on_every_step_in_the_exact_lane(tmp_path):
    made, replaced = baselines.promote(run("first"), {"environment": {"cpu_model": "AMD EPYC"}, "stack": STACK},
                                       "first night", tmp_path)
    assert replaced is None
    assert made.losses == dict(enumerate(NATIVE_CPU_RANDOM_LOSSES, start=1)) and made.why == "first night"
    assert made.performance == {"tokens_per_s": 600.0, "peak_memory_gib": 1.0, "peak_rss_bytes": 2**30,
                                "compile_warmup_s": 0.0, "total_s": 60.0, "seconds_train": 40.0}
    assert (tmp_path / "baselines" / f"{made.key}.json").is_file()
    same = curve_finding(run("second"), tmp_path)
    assert (same.status, same.margin, same.value, same.baseline) == ("pass", RULE.margin, 11.94006, 11.94006)
    assert "exact lane: the same environment" in same.detail and "worst of 10 steps" in same.detail
    # a numerics change that leaves the workload key alone: steps 6 on move by 0.05 nats, past the 0.02 margin
    planted = [loss + (0.05 if step >= 6 else 0.0) for step, loss in enumerate(NATIVE_CPU_RANDOM_LOSSES, start=1)]
    changed = curve_finding(run("planted", planted), tmp_path)
    assert changed.status == "fail" and changed.detail.startswith("parts from it at step 6, ")


def test_a_run_in_another_environment_is_judged_in_the_band_lane_naming_the_packages(tmp_path):
    baselines.promote(run("first"), {"stack": STACK}, "first night", tmp_path)
    elsewhere = curve_finding(run("lowest", stack=LOWEST), tmp_path, stack=LOWEST)
    assert (elsewhere.status, elsewhere.margin) == ("pass", RULE.band)
    assert "band lane: another environment than the baseline's (1 package(s) differ: prefect 3.9.1 -> 3.9.0)" in \
        elsewhere.detail


def test_only_a_passed_run_is_promoted_and_a_retired_baseline_is_kept(tmp_path):
    with pytest.raises(baselines.BaselineError, match="run_id: failed ended fail; fix: promote a run that passed"):
        baselines.promote(run("failed", verdict="fail", failure_class="numerics"), {}, "no", tmp_path)
    with pytest.raises(baselines.BaselineError, match="why: missing; fix: say why this run is the baseline: --why"):
        baselines.promote(run("first"), {}, " ", tmp_path)
    first, _ = baselines.promote(run("first"), {}, "first night", tmp_path)
    second, kept = baselines.promote(run("second"), {}, "new SDK", tmp_path)  # replaces it: the first retired, kept
    assert first.key == second.key and [b.run_id for b in baselines.listed(tmp_path)] == ["second"]
    assert kept.parent == tmp_path / "baselines" / "retired" and kept.name.startswith(f"{first.key}-")
    assert json.loads(kept.read_text())["run_id"] == "first"
    where = baselines.retire(second.key, tmp_path)
    assert where.parent.name == "retired" and baselines.listed(tmp_path) == []
    with pytest.raises(baselines.BaselineError, match=f"key: no baseline '{second.key}' in force; fix: there is none "
                                                      "in force; promote a run first"):
        baselines.show(second.key, tmp_path)


def test_a_baseline_file_that_does_not_read_is_named_with_the_fix(tmp_path):
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "k.json").write_text("{bad")
    with pytest.raises(baselines.BaselineError, match=rf"^baseline: {tmp_path / 'baselines' / 'k.json'} does not read "
                                                      r"as a baseline \(.*\); fix: move it aside, e.g. mv "):
        baselines.listed(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(baselines.BaselineError, match="history_dir: .*file is a file; fix: pass the history folder"):
        baselines.listed(tmp_path / "file")


def test_golden_command_lists_and_refuses_an_unknown_run(tmp_path, capsys):
    assert main(["golden", "list", "--history-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"baselines: {tmp_path / 'baselines'}, 0 in force"]
    assert main(["golden", "promote", "nope", "--why", "x", "--history-dir", str(tmp_path)]) == 2
    assert f"run_id: no run 'nope': no history table at {tmp_path / 'runs.parquet'}; fix: " in capsys.readouterr().err
    assert main(["golden", "show", "--history-dir", str(tmp_path)]) == 2
    assert "key: missing; fix: titanflow golden show KEY" in capsys.readouterr().err


def test_the_baselines_live_beside_the_history_table(tmp_path, monkeypatch):
    monkeypatch.setenv("TITANFLOW_HISTORY", str(tmp_path / "history"))
    assert baselines.baselines_dir() == tmp_path / "history" / "baselines"
    assert curve_finding(run("first"), None).status == "no baseline"  # the default folder, empty
