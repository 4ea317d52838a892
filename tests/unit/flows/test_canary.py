"""The qwen3-canary flow's refusals before anything runs, and its report from built records (titanflow.canary.compare):
the packages that differ, each run's figures pinned -> successor, a changed verdict marked."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from titanflow.canary.compare import CanaryResult, CanaryRow, canary_markdown, figures, headline
from titanflow.canary.side_run import SideRun
from titanflow.flows.canary import artifact_key, qwen3_canary
from titanflow.judge.environment import stack_difference
from titanflow.record.summary import RunSummary
from titanflow.results import TrainResult
from titanflow.successor import CanarySide


def _venv(path: Path) -> str:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").touch()
    return str(path)


def test_a_profile_that_names_no_successor_is_refused_before_any_folder_or_run(tmp_path):
    with pytest.raises(ValueError, match=r"^profile: 'cpu' names no successor; fix: write the successor's name in "):
        qwen3_canary.fn(profile="cpu", runs_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_bad_suite_parameter_is_refused_before_any_folder_or_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TITANFLOW_VENV_CPU_LOWEST", _venv(tmp_path / "lowest"))
    monkeypatch.setenv("TITANFLOW_VENV_CPU", _venv(tmp_path / "newest"))
    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match=r"scenarios/inits: unknown \['natve'\]"):
        qwen3_canary.fn(profile="cpu-lowest", scenarios=["natve"], runs_dir=str(runs))
    with pytest.raises(ValueError, match="steps"):
        qwen3_canary.fn(profile="cpu-lowest", steps=0, runs_dir=str(runs))
    assert not runs.exists()


def _run(role: str, verdict: str, losses: list[float], tokens_per_s: float) -> SideRun:
    train = TrainResult(log_path=None, metrics_path=None, losses=losses, tokens_per_s=tokens_per_s,
                        peak_memory_gib=1.5, peak_rss_bytes=1, wall_s=9.0)
    summary = RunSummary(run_id=f"native-cpu-random-{role}", scenario="native", target="cpu", init="random",
                         steps=len(losses), train=train, verdict=verdict, timings_s={"train": 8.0},
                         reason=None if verdict == "pass" else "final loss 12.5 above the golden's 11.9 + 0.2")
    return SideRun(role=role, profile=role, scenario="native", init="random", run_id=summary.run_id,
                   run_dir=f"/c/{role}/runs/{summary.run_id}", flow_run_id=None, summary=summary, wall_s=10.0)


def test_the_report_leads_with_the_packages_then_each_run_side_by_side():
    pinned = CanarySide(role="pinned", profile="cpu-lowest", venv="/r/.venv-lowest", python="/r/.venv-lowest/bin/python")
    successor = CanarySide(role="successor", profile="cpu", venv="/r/.venv", python="/r/.venv/bin/python")
    packages = stack_difference({"distributions": {"pandas": "2.2.3", "prefect": "3.9.0", "tzdata": "2024.1"}},
                                {"distributions": {"pandas": "3.1.1", "prefect": "3.9.1", "narwhals": "2.0"}})
    row = CanaryRow(scenario="native", init="random", pinned=figures(_run("pinned", "pass", [12.0, 11.9], 400.0)),
                    successor=figures(_run("successor", "fail", [12.0, 12.5], 300.0)))
    result = CanaryResult(canary_id="canary-x", folder="/c", target="cpu", pinned=pinned, successor=successor,
                          packages=packages, rows=[row], started_at=datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC))
    text = canary_markdown(result)
    assert headline(result) == "canary cpu-lowest -> cpu on cpu: 4 package(s) differ; 1 of 1 run(s) changed verdict"
    assert ("- `+narwhals 2.0`\n- `pandas 2.2.3 -> 3.1.1`\n- `prefect 3.9.0 -> 3.9.1`\n- `-tzdata 2024.1`\n"
            in text)
    # tokens/s 400 -> 300 is -25.0%; the final loss (12.5 - 11.9) / 11.9 = +5.0%
    assert ("| native | random | pass -> fail **changed** | 12.0000 -> 12.0000 (+0.0%) | 11.9000 -> 12.5000 (+5.0%) | "
            "400 -> 300 (-25.0%) | 1.500 -> 1.500 (+0.0%) | 8.0 -> 8.0 (+0.0%) |") in text
    assert ("- native/random on `cpu`: final loss 12.5 above the golden's 11.9 + 0.2 "
            "(/c/successor/runs/native-cpu-random-successor)") in text
    assert text.index("## Packages that differ") < text.index("## Runs")


def test_a_side_without_a_summary_shows_why_and_the_artifact_key_is_prefects_form():
    crashed = SideRun(role="successor", profile="trn2-next", scenario="native", init="random", run_id="r",
                      run_dir="/c/successor/runs/r", flow_run_id=None, summary=None,
                      why="flow run Crashed: ImportError: libneuronxla\nmore", wall_s=1.0)
    assert figures(crashed).model_dump(exclude_none=True) == {
        "run_dir": "/c/successor/runs/r", "why": "flow run Crashed: ImportError: libneuronxla\nmore"}
    assert artifact_key("trn2_Next") == "canary-trn2-next"
