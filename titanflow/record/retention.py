"""What ``titanflow prune`` keeps of a runs folder: the retention policy of ``retention.toml`` (beside this module)
applied to each run folder, a dry run by default that says the bytes it would free, ``--apply`` to act.

    titanflow prune                 # what would go, and the bytes it frees
    titanflow prune --apply         # do it

Per run (its ``summary.json``): no verdict yet (in progress, or stopped and resumable) or a node baseline promoted
from it (titanflow.judge.baselines) -> kept whole; a failed or cancelled run within ``failed_keep_days`` of finishing, or one of the
newest ``passing_keep_last`` passing runs of its workload (scenario, target, init and the parameters' key) -> kept
whole; any other run loses its heavy parts (the export and the step checkpoints) and, once older than
``records_keep_days``, the rest too. A folder without a readable summary.json is not titanflow's to judge, nor is a link
to a folder elsewhere: both kept. The runs inside a bisect's or a canary's folder (:data:`NESTED`) keep everything
``failed_keep_days``, then lose their heavy parts, and go whole after ``records_keep_days``.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from titanflow import paths
from titanflow.judge.baselines import listed
from titanflow.judge.workload import config_key
from titanflow.record.summary import SUMMARY, read_summary

POLICY_PATH = Path(__file__).with_name("retention.toml")
#: The heavy parts of a run folder, which go first: the export and the step checkpoints.
HEAVY = ("export", "export.partial", "train/checkpoint")


class Policy(BaseModel):
    """The retention policy (``retention.toml``'s comments say what each figure means)."""

    failed_keep_days: float = Field(ge=0)
    passing_keep_last: int = Field(ge=1)
    records_keep_days: float = Field(ge=0)


def load_policy(path: Path = POLICY_PATH) -> Policy:
    """The policy in ``path``.

    Raises:
        ValueError: the file is no valid TOML, or a figure is missing or out of range (names the file and field).
    """
    try:
        return Policy.model_validate(tomllib.loads(path.read_text()))
    except (tomllib.TOMLDecodeError, ValidationError) as err:
        raise ValueError(f"{path}: {err}") from None


@dataclass(frozen=True)
class Decision:
    """What the policy does with one run folder: ``action`` "keep", "heavy" (its export and step checkpoints go) or
    "whole" (the folder goes); ``why``; ``paths`` that go; ``bytes`` they hold."""

    run_dir: Path
    action: str
    why: str
    paths: tuple[Path, ...] = ()
    bytes: int = 0


def _freed(going: tuple[Path, ...]) -> int:
    """Bytes the disk gets back when every path of ``going`` is removed (symbolic links not followed): a file's
    size once per inode, and only for an inode whose hard links all lie within ``going``. A run's export shares its
    safetensors with the last step checkpoint by hard link (titanflow.export.assemble), so removing one of the two
    frees nothing and removing both frees the file once."""
    files = [p for path in going for p in ((path,) if not path.is_dir() or path.is_symlink() else path.rglob("*"))
             if p.is_file() or p.is_symlink()]
    links: dict[tuple[int, int], list] = {}
    for file in files:
        info = file.lstat()
        links.setdefault((info.st_dev, info.st_ino), []).append(info)
    return sum(found[0].st_size for found in links.values() if len(found) >= found[0].st_nlink)


def _going(run_dir: Path, parts: tuple[str, ...]) -> Decision:
    found = tuple(p for p in (run_dir / part for part in parts) if p.exists())
    return Decision(run_dir, "heavy", "", found, _freed(found))


def plan(runs_dir: Path | None = None, policy: Policy | None = None, history_dir: Path | None = None,
         now: datetime | None = None) -> list[Decision]:
    """The decision for every run folder of ``runs_dir`` (default: the runs folder), by folder name (module
    docstring); ``now``: the time the ages are counted to (UTC; default now)."""
    runs_dir = Path(runs_dir) if runs_dir is not None else paths.runs_root()
    policy = policy or load_policy()
    now = now or datetime.now(timezone.utc)
    promoted = {b.run_id for b in listed(history_dir)}
    runs = []
    # a link to a folder elsewhere is not this runs folder's to prune: only real folders are read
    for folder in sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.is_symlink()) if runs_dir.is_dir() else []:
        try:
            runs.append((folder, read_summary(folder / SUMMARY)))
        except (OSError, ValueError):
            continue  # not a run folder titanflow wrote, or not readable: not pruned
    newest: dict[tuple, list[str]] = {}
    for folder, summary in sorted(runs, key=lambda r: r[1].finished_at or now, reverse=True):
        if summary.verdict == "pass":
            key = (summary.scenario, summary.target, summary.init, config_key(summary.parameters))
            newest.setdefault(key, []).append(folder.name)
    decisions = []
    for folder, summary in runs:
        finished = summary.finished_at or now
        age_days = (now - finished) / timedelta(days=1)
        key = (summary.scenario, summary.target, summary.init, config_key(summary.parameters))
        if summary.verdict is None:
            decisions.append(Decision(folder, "keep", "no verdict yet: in progress, or stopped and resumable"))
        elif folder.name in promoted:
            decisions.append(Decision(folder, "keep", "a node baseline was promoted from it"))
        elif summary.verdict in ("fail", "cancelled") and age_days <= policy.failed_keep_days:
            decisions.append(Decision(folder, "keep", f"{summary.verdict} {age_days:.1f} days ago, kept "
                                                      f"{policy.failed_keep_days:g} days"))
        elif summary.verdict == "pass" and folder.name in newest[key][:policy.passing_keep_last]:
            decisions.append(Decision(folder, "keep", f"one of the newest {policy.passing_keep_last} passing runs "
                                                      "of its workload"))
        else:
            decisions.append(_past_keeping(folder, summary.verdict, "past the policy", age_days, policy))
    return decisions + _nested(runs_dir, policy, now)


def _past_keeping(folder: Path, what: str, past: str, age_days: float, policy: Policy) -> Decision:
    """A run past what keeps it whole (``what``: the run in words, ``past``: why in words): removed whole once older
    than ``records_keep_days``, else its heavy parts go."""
    if age_days > policy.records_keep_days:
        return Decision(folder, "whole", f"{what}, {age_days:.0f} days old: past records_keep_days "
                        f"{policy.records_keep_days:g}", (folder,), _freed((folder,)))
    heavy = _going(folder, HEAVY)
    return Decision(folder, "heavy" if heavy.paths else "keep",
                    f"{what}, {past}: its export and step checkpoints go" if heavy.paths
                    else f"{what}, {past}, nothing heavy left", heavy.paths, heavy.bytes)


#: Run folders inside a bisect's or a canary's folder of the runs folder: a bisect's probes
#: (``bisect-*/runs/<probe>``, titanflow.bisect.probe) and a canary's sides (``canary-*/<role>/runs/<run>``, flows/canary.py).
NESTED = ("bisect-*/runs/*", "canary-*/*/runs/*")


def _nested(runs_dir: Path, policy: Policy, now: datetime) -> list[Decision]:
    """The decisions for the runs of bisects and canaries: judged once, read from their folder's report, they compete
    with no workload's newest runs; each keeps everything ``failed_keep_days`` after it finished, then loses its
    export and step checkpoints, and goes whole after ``records_keep_days``; one without a verdict is kept."""
    decisions = []
    for folder in sorted(p for pattern in NESTED for p in runs_dir.glob(pattern) if p.is_dir() and not p.is_symlink()):
        try:
            summary = read_summary(folder / SUMMARY)
        except (OSError, ValueError):
            continue
        age_days = (now - (summary.finished_at or now)) / timedelta(days=1)
        kind = "a bisect's probe" if folder.parents[1].name.startswith("bisect-") else "a canary's run"
        if summary.verdict is None or age_days <= policy.failed_keep_days:
            decisions.append(Decision(folder, "keep", f"{kind}, kept {policy.failed_keep_days:g} days"))
        else:
            decisions.append(_past_keeping(folder, kind, f"{age_days:.0f} days old", age_days, policy))
    return decisions


def apply(decisions: list[Decision]) -> int:
    """Remove what ``decisions`` say goes; returns the bytes freed (as counted by :func:`plan`)."""
    freed = 0
    for decision in decisions:
        for path in decision.paths:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        freed += decision.bytes
    return freed
