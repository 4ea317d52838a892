"""Scratch git repositories and judged run summaries for the bisect's tests (titanflow.bisect)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers import FIXTURES
from titanflow.bisect.probe import ProbeRun
from titanflow.judge.goldens import curve_path, read_curve
from titanflow.record.comparison import compare_with_history
from titanflow.record.summary import SUMMARY, RunSummary, read_summary
from titanflow.run.recorder import RunRecorder

#: The planted regression: the start of the line of titanflow/params.py that sets the default learning rate, and
#: what the plant makes it (the field's other arguments, its description included, are left as they are).
LR_LINE = "lr: float = Field(8e-4,"
PLANTED_LR_LINE = "lr: float = Field(3e-3,"

#: A passing run: native, cpu, random init, 10 steps at lr 8e-4 (its losses are the golden curve's).
PASSING_RUN = FIXTURES / "run_folders" / "native-cpu-random"

#: The same run at lr 3e-3 (the planted commit's default), measured by tests/e2e/test_bisect_runs.py (its probes of
#: the planted revisions: torch 2.13.0 CPU, torchtitan 0.3.0, 2 ranks): step 1 equal, the loss before any update;
#: from step 2 on below the golden (11.90538 vs 11.93394), 0.83611 nats below it at step 10.
PLANTED_LR_LOSSES = [11.94006, 11.90538, 11.73101, 11.55792, 11.40092, 11.16024, 11.03764, 10.94388, 10.86009,
                     10.79066]


def commit(repo: Path, message: str, files: dict[str, str] | None = None) -> str:
    """Write ``files`` ({path: text}) in ``repo``, stage everything and commit with ``message``; the new hash."""
    for name, text in (files or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=titanflow tests", "-c", "user.email=tests@titanflow.invalid", "commit", "-q",
        "--no-verify", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def git(repo: Path, *args: str) -> str:
    """``git -C repo args`` (must succeed); its stdout, stripped."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def chain(repo: Path, count: int, plant_at: int | None = None, plant: dict[str, str] | None = None,
          plant_message: str | None = None) -> list[str]:
    """``count`` commits on ``repo``'s HEAD, each a line added to ``docs/chain.md`` (``chain <i>``), except number
    ``plant_at`` (1-based), which writes ``plant`` ({path: text}) instead (message ``plant_message``, default
    ``plant <i>``); their hashes in order."""
    hashes = []
    for i in range(1, count + 1):
        if i == plant_at:
            hashes.append(commit(repo, plant_message or f"plant {i}", plant))
            continue
        lines = (repo / "docs" / "chain.md").read_text() if (repo / "docs" / "chain.md").is_file() else ""
        hashes.append(commit(repo, f"chain {i}", {"docs/chain.md": f"{lines}line {i}\n"}))
    return hashes


def scratch_repo(path: Path) -> Path:
    """An empty git repository at ``path`` with one commit, ``base``."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    commit(path, "base", {"README.md": "scratch\n"})
    return path


def copy_tracked(source: Path, dest: Path) -> Path:
    """The files of the checkout ``source`` git would commit (tracked, and untracked ones it does not ignore), as
    they are in its working tree, copied to ``dest``."""
    names = git(source, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, names):
        if (source / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, dest / name)
    return dest


def judged_summary(run_dir: Path, losses: list[float] | None = None) -> RunSummary:
    """The passing 10-step run (:data:`PASSING_RUN`) in ``run_dir`` with ``losses`` (default its own), computed in
    the golden curve's numerics environment, judged as the scenario flow judges it: titanflow.record.comparison.compare_with_history against the goldens and
    $TITANFLOW_HISTORY, then the verdict (titanflow.judge.verdict through RunRecorder.write)."""
    run_dir.mkdir(parents=True)
    for name in ("summary.json", "train.log", "metrics.csv"):
        shutil.copy(PASSING_RUN / name, run_dir / name)
    summary = read_summary(run_dir / SUMMARY)
    if losses is not None:
        summary.train.losses = list(losses)
    # computed where the golden was recorded: the golden_curve rule's own margin (0.02 nats) applies
    golden = read_curve(curve_path(summary.scenario, summary.target, summary.init))
    summary = summary.model_copy(update={"run_id": run_dir.name, "environment": golden.environment})
    recorder = RunRecorder(run_dir, summary)
    recorder.write()
    recorder.summary.findings = compare_with_history(run_dir / SUMMARY).findings
    recorder.write()
    return recorder.summary


def planted_losses() -> list[float]:
    """:data:`PLANTED_LR_LOSSES`, a copy."""
    return list(PLANTED_LR_LOSSES)


def probe_run(revision: str, summary: RunSummary | None, run_dir: Path, why: str | None = None) -> ProbeRun:
    """A :class:`ProbeRun` of ``revision`` that ended with ``summary`` (None: a crash, ``why``)."""
    return ProbeRun(revision=revision, run_id=run_dir.name, run_dir=str(run_dir), flow_run_id=None,
                    environment="this environment (test)", summary=summary, log_tail="", why=why, wall_s=0.0)
