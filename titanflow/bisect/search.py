"""The bisect: inputs checked, the endpoints probed, then git's bisect driven probe by probe.

    result = new_result(check_inputs(".", "v1.2", "main", {"scenario": "native", "target": "cpu",
                                                           "init": "random"}), folder)
    bisect_range(result, probe)        # probe(revision, role) -> ProbeRun: titanflow.bisect.probe.run_probe

1. Inputs (:func:`check_inputs`, before any probe): the repository is a git checkout, good and bad name commits and
   good is an ancestor of bad (titanflow.bisect.revisions.check_range), the scenario parameters are valid.
2. The bad revision is probed first: its run must fail, and its failure class and first failed check become the
   check the bisect looks for (titanflow.bisect.verdict.learn_check). Then the good revision: its run must pass.
   Either endpoint that does not hold refuses the bisect (status ``refused``), before git bisect starts.
3. git bisect (titanflow.bisect.session.GitBisect) names each next revision; each probe's verdict (good, bad,
   skip: titanflow.bisect.verdict.probe_verdict) is marked, until git names the first bad commit (``found``) or
   only skipped commits are left (``ambiguous``, the candidates listed). On a linear history of n commits after
   good, git needs at most ceil(log2(n)) probes when none is skipped.
"""

from __future__ import annotations

import datetime
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from titanflow.bisect.probe import BisectFolder, ProbeRun
from titanflow.bisect.revisions import check_range, checkout, commit_message, git, subject
from titanflow.bisect.session import BisectVerdict, GitBisect
from titanflow.bisect.verdict import BisectRefused, Check, learn_check, probe_verdict
from titanflow.launch.metrics import logged_losses
from titanflow.params import ScenarioRun
from titanflow.refusal import describe

#: Which probe: the bad endpoint (learns the check), the good endpoint (must pass), or a step of git bisect.
ProbeRole = Literal["bad", "good", "step"]

#: How a bisect ended: the first bad commit found; only skipped commits left (the candidates listed); an
#: endpoint that does not hold (the reason says which); stopped by an error or a cancel before the end.
BisectStatus = Literal["found", "ambiguous", "refused", "stopped"]


class Probe(BaseModel):
    """One probe as the bisect's table shows it."""

    role: ProbeRole
    revision: str = Field(description="full hash (a bisect over environments: env-<k>, titanflow.bisect.env_search)")
    subject: str = Field(description="first line of its commit message (over environments: the changes it has)")
    verdict: BisectVerdict
    failure_class: str | None = Field(description="titanflow.judge.failures class of its run; None when it passed")
    checks: list[str] = Field(description="the checks its run failed (titanflow.bisect.verdict.failed_checks)")
    reason: str | None = Field(description="why it failed or was skipped: its run's error or reason, or why it "
                               "has no summary")
    losses: list[float] = Field(description="nats, step 1 first (summary.json, else the run's metrics.csv)")
    run_id: str
    run_dir: str
    flow_run_id: str | None = Field(description="the probe's qwen3-scenario flow run")
    environment: str = Field(description="the Python it ran with (titanflow.bisect.environment)")
    wall_s: float = Field(description="seconds the probe took, worktree and install included")


class BisectInputs(BaseModel):
    """The checked inputs of a bisect."""

    repo: str
    good: str = Field(description="full hash")
    bad: str = Field(description="full hash")
    commits: int = Field(description="commits after good up to bad (git rev-list --count good..bad)")
    parameters: dict = Field(description="the probes' scenario flow parameters: scenario, target, init, steps")


class BisectRecord(BaseModel):
    """What a bisect over commits or over environments keeps as it runs: its folder, its flow run, how it ended, the
    check its bad endpoint fails, its probes and its times."""

    bisect_id: str = Field(description="its folder's name")
    folder: str
    flow_run_id: str | None = None
    status: BisectStatus = "stopped"
    reason: str | None = Field(None, description="why refused or stopped")
    check: Check | None = Field(None, description="the check the bad endpoint fails")
    probes: list[Probe] = Field(default_factory=list)
    started_at: datetime.datetime = Field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    finished_at: datetime.datetime | None = None

    @property
    def steps_taken(self) -> int:
        """Probes the search asked for (the endpoints not counted)."""
        return sum(p.role == "step" for p in self.probes)

    @property
    def wall_s(self) -> float | None:
        """Seconds from start to finish; None while running."""
        return round((self.finished_at - self.started_at).total_seconds(), 1) if self.finished_at else None


class BisectResult(BisectRecord, BisectInputs):
    """A bisect, as titanflow bisect prints it, the artifact shows it and ``bisect.json`` keeps it."""

    first_bad: str | None = None
    first_bad_message: str | None = Field(None, description="its full commit message")
    candidates: list[str] = Field(default_factory=list, description="ambiguous: the commits git could not tell apart")
    bisect_log: str = Field("", description="git bisect log: replay with git bisect replay")

    @property
    def steps_bound(self) -> int:
        """ceil(log2(commits)): the most probes git bisect needs on a linear history without skips."""
        return math.ceil(math.log2(self.commits)) if self.commits > 1 else 0


def check_inputs(repo: Path | str, good: str, bad: str, parameters: dict) -> BisectInputs:
    """The bisect's inputs, checked before any probe (module docstring, 1).

    Raises:
        ValueError: the field (repo, good, bad, or a scenario parameter) and the fix
            (titanflow.bisect.revisions.RevisionError is one).
    """
    top = checkout(repo)
    good_hash, bad_hash = check_range(top, good, bad)
    try:
        ScenarioRun.model_validate({k: v for k, v in parameters.items() if v is not None})
    except ValidationError as err:
        raise ValueError(describe(err)) from None
    commits = int(git(top, "rev-list", "--count", f"{good_hash}..{bad_hash}").stdout)
    return BisectInputs(repo=str(top), good=good_hash, bad=bad_hash, commits=commits,
                        parameters={k: v for k, v in parameters.items() if v is not None})


def new_bisect_id(parameters: dict) -> str:
    """``bisect-<scenario>-<target>-<init>-<UTC time>-<4 hex>``: the bisect's folder name, sortable and unique
    (as titanflow.params.new_run_id makes run ids)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"bisect-{parameters['scenario']}-{parameters['target']}-{parameters['init']}-{stamp}-{secrets.token_hex(2)}"


def new_result(inputs: BisectInputs, folder: BisectFolder) -> BisectResult:
    """The result of a bisect about to start in ``folder``."""
    return BisectResult(**inputs.model_dump(), bisect_id=folder.root.name, folder=str(folder.root))


def as_probe(run: ProbeRun, role: ProbeRole, subject_line: str, check: Check | None) -> Probe:
    """The table row of a probe's run, judged against ``check`` (None: before the check is known, a run that
    fails is a skip)."""
    verdict, failure_class, checks = probe_verdict(run.summary, run.log_tail, check)
    summary = run.summary
    reason = run.why if summary is None else (None if verdict == "good" else summary.error or summary.reason)
    losses = summary.losses if summary and summary.losses else logged_losses(Path(run.run_dir) / "metrics.csv")
    return Probe(role=role, revision=run.revision, subject=subject_line, verdict=verdict, failure_class=failure_class,
                 checks=checks, reason=reason, losses=losses, run_id=run.run_id, run_dir=run.run_dir,
                 flow_run_id=run.flow_run_id, environment=run.environment, wall_s=run.wall_s)


def bisect_range(result: BisectResult, probe: Callable[[str, ProbeRole], ProbeRun]) -> BisectResult:
    """Probe the endpoints, then bisect (module docstring, 2 and 3), filling ``result`` as it goes; returns it
    with its status set (``found``, ``ambiguous`` or ``refused``; an error or a cancel propagates and leaves
    it ``stopped``)."""
    repo = Path(result.repo)

    def probe_and_judge(revision: str, role: ProbeRole) -> Probe:
        run = probe(revision, role)
        try:
            if result.check is None:  # the bad endpoint: it names the check, or the bisect is refused
                result.check = learn_check(run.summary, run.log_tail, run.why or "")
        finally:  # a refused bad endpoint keeps its row: the table says how its run ended
            row = as_probe(run, role, subject(repo, revision), result.check)
            result.probes.append(row)
        return row

    try:
        probe_and_judge(result.bad, "bad")
        good = probe_and_judge(result.good, "good")
        if good.verdict != "good":
            same = "fails the same check" if good.verdict == "bad" else f"did not pass ({good.reason or 'no reason'})"
            raise BisectRefused(f"good: {result.good[:12]} {same} as bad {result.bad[:12]} ({result.check}); fix: pass an "
                                "older good revision whose run passes")
    except BisectRefused as refused:
        result.status, result.reason = "refused", str(refused)
        return result
    folder = BisectFolder(Path(result.folder))
    with GitBisect(repo, folder.worktrees / "bisect-state", result.good, result.bad) as session:
        while session.step is None and result.steps_taken < result.commits:
            revision = session.candidate()
            session.mark(revision, probe_and_judge(revision, "step").verdict)
        result.bisect_log = session.log()
    if session.step is not None and session.step.first_bad is not None:
        result.status, result.first_bad = "found", session.step.first_bad
        result.first_bad_message = commit_message(repo, result.first_bad)
    else:
        result.status = "ambiguous"
        result.candidates = session.step.candidates if session.step else []
        result.reason = f"only skipped commits are left: the first bad commit is one of {len(result.candidates)}"
    return result
