"""The bisect over environments: which package change between a good and a bad environment moves the verdict.

    inputs = check_env_inputs(".", "HEAD", good_env="good.txt", bad_env="bad.txt", parameters={...})
    result = new_env_result(inputs, folder)
    bisect_environments(result, probe)      # probe(k, role) -> ProbeRun: the environment with the first k changes

1. Inputs (:func:`check_env_inputs`, before any probe): each side is a constraints file (``--good-env``/``--bad-env``,
   titanflow.bisect.packages.read_env_file: this venv's packages with the file's pins, the environment its overlay
   makes) or a run's recorded stack (``--good-run``/``--bad-run``: every package of its venv); the two differ
   in at least one package; the revision (the code every probe runs, default the checkout's HEAD) was installed in
   this environment, which the overlays are laid over; the scenario parameters are valid.
2. The changes are ordered (titanflow.bisect.packages.order_changes: dependencies first, then by name), the
   requirements read from the bad environment's overlay. Environment k is the good one with the first k changes
   (0: good, n: bad), each probed as the same ``qwen3-scenario`` run the commit bisect probes, in an overlay built
   once per content key (titanflow.bisect.overlay).
3. The bad endpoint names the check (titanflow.bisect.verdict.learn_check), the good one must pass; a side given as
   a run keeps that run's verdict and is not probed again. Then a binary search over k: each probe good, bad or skip
   (as git bisect's), the middle untried k of those left, until one change is left (``found``) or only skipped ones
   (``ambiguous``). n changes take at most ceil(log2(n)) probes without skips.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from titanflow.bisect.environment import current_key, dependency_key, plan_environment
from titanflow.bisect.overlay import base_packages, ensure_overlay, overlay_pins, requirements_in
from titanflow.bisect.packages import Environment, PackageChange, order_changes, package_changes, packages_at, \
    read_env_file, run_environment
from titanflow.bisect.probe import BisectFolder, ProbeRun
from titanflow.bisect.revisions import checkout, file_at, resolve
from titanflow.bisect.search import BisectRecord, Probe, ProbeRole, as_probe
from titanflow.bisect.verdict import BisectRefused, Check, learn_check
from titanflow.launch.metrics import log_tail
from titanflow.params import ScenarioRun
from titanflow.record.history import LOG_TAIL_LINES
from titanflow.record.summary import RunSummary
from titanflow.refusal import describe


#: What a refusal of the bad endpoint asks for (titanflow.bisect.verdict.learn_check).
BAD = "bad environment (--bad-env or --bad-run)"


class KnownVerdict(BaseModel):
    """An endpoint given as a run: its run id, folder, summary and the end of its train.log (its verdict is kept)."""

    run_id: str
    run_dir: str
    summary: RunSummary
    log_tail: str = ""


class EnvBisectInputs(BaseModel):
    """The checked inputs of a bisect over environments."""

    repo: str
    revision: str = Field(description="full hash: the code every probe runs")
    good: Environment
    bad: Environment
    changes: list[PackageChange] = Field(description="the differing packages, by name (ordered once the bad "
                                         "environment's overlay is built)")
    parameters: dict = Field(description="the probes' scenario flow parameters: scenario, target, init, steps")
    good_run: KnownVerdict | None = None
    bad_run: KnownVerdict | None = None


class EnvBisectResult(BisectRecord, EnvBisectInputs):
    """A bisect over environments as titanflow bisect prints it, the artifact shows it and ``bisect.json`` keeps it;
    each probe's ``revision`` is its environment's label (``env-<k>``), its ``subject`` the changes it has."""

    first_bad: PackageChange | None = Field(None, description="the change that moves the verdict")
    candidates: list[PackageChange] = Field(default_factory=list, description="ambiguous: the changes left")

    @property
    def steps_bound(self) -> int:
        """ceil(log2(n)) for n changes: the most probes the search needs without skips."""
        return math.ceil(math.log2(len(self.changes))) if len(self.changes) > 1 else 0


def _side(field: str, env_file: str | None, run: str | None, runs_dir: Path | None) -> tuple[Environment,
                                                                                           KnownVerdict | None]:
    if (env_file is None) == (run is None):
        raise ValueError(f"{field}: pass one of --{field}-env FILE or --{field}-run RUN_ID; fix: name the {field} "
                         "environment once")
    if env_file is not None:  # the venv with the file's pins: what its overlay makes (titanflow.bisect.overlay)
        pinned = read_env_file(f"{field}_env", env_file)
        return pinned.model_copy(update={"packages": dict(sorted({**base_packages(), **pinned.packages}.items()))}), None
    environment, summary, folder = run_environment(f"{field}_run", run, runs_dir)
    return environment, KnownVerdict(run_id=summary.run_id, run_dir=str(folder), summary=summary,
                                     log_tail=log_tail(folder / "train.log", LOG_TAIL_LINES) or "")


def check_env_inputs(repo: Path | str, revision: str, parameters: dict, *, good_env: str | None = None,
                     bad_env: str | None = None, good_run: str | None = None, bad_run: str | None = None,
                     runs_dir: Path | None = None) -> EnvBisectInputs:
    """The inputs of a bisect over environments, checked before any probe (module docstring, 1); ``runs_dir``: where
    run ids are looked up (default titanflow.paths.runs_root).

    Raises:
        ValueError: the field and the fix: a side given twice or not at all, an env file that does not parse, a run
            without a recorded stack, two identical environments, a good run that did not pass, a bad run that did
            not fail a check, a revision not installed here, a bad scenario parameter.
    """
    try:
        run = ScenarioRun.model_validate({k: v for k, v in parameters.items() if v is not None})
    except ValidationError as err:
        raise ValueError(describe(err)) from None
    good, good_known = _side("good", good_env, good_run, runs_dir)
    bad, bad_known = _side("bad", bad_env, bad_run, runs_dir)
    changes = package_changes(good.packages, bad.packages)
    if not changes:
        raise ValueError(f"bad: {bad.label} gives the same package versions as good {good.label} ({len(bad.packages)} "
                         "packages); nothing to bisect; fix: pass environments that differ (titanflow compare GOOD BAD "
                         "lists a pair of runs' differences)")
    if good_known is not None and good_known.summary.verdict != "pass":
        raise ValueError(f"good_run: {good_known.run_id} ended {good_known.summary.verdict}; fix: pass a run that "
                         "passed as good")
    if bad_known is not None:
        try:
            learn_check(bad_known.summary, bad_known.log_tail, bad=BAD)
        except BisectRefused as refused:
            raise ValueError(f"bad_run: {bad_known.run_id}: {refused}") from None
    top = checkout(repo)
    full = resolve(top, "revision", revision)
    if not plan_environment(dependency_key(lambda path: file_at(top, full, path)), run.target).reused:
        raise ValueError(f"revision: {revision!r} ({full[:12]}) was not installed in this environment (its "
                         f"dependencies differ from this one's, {current_key()}), which the environments are laid "
                         "over; fix: bisect at the revision this venv was installed from (its checkout's HEAD)")
    return EnvBisectInputs(repo=str(top), revision=full, good=good, bad=bad, changes=changes,
                           parameters={k: v for k, v in parameters.items() if v is not None},
                           good_run=good_known, bad_run=bad_known)


def pip_options(result: EnvBisectInputs) -> list[str]:
    """The pip options of both sides, good's first, each once (a package comes from either side's source)."""
    groups: list[tuple[str, ...]] = []
    for side in (result.good.pip_options, result.bad.pip_options):
        i = 0
        while i < len(side):
            width = 1 if side[i] == "--no-index" else 2
            if tuple(side[i:i + width]) not in groups:
                groups.append(tuple(side[i:i + width]))
            i += width
    return [word for group in groups for word in group]


def environment_pins(result: EnvBisectInputs, k: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The overlay pins of environment ``k`` (the good one with the first k changes) over ``base`` (default this
    Python's packages)."""
    return overlay_pins(packages_at(result.good.packages, result.changes, k), base or base_packages())


def order_result_changes(result: EnvBisectInputs, cache_root: Path | None = None) -> list[PackageChange]:
    """Order ``result.changes`` (titanflow.bisect.packages.order_changes) with the requirements of the bad
    environment's versions, read from its overlay (built here, once per content key: the bad probe reuses it).

    Raises:
        titanflow.bisect.environment.EnvironmentUnavailable: the bad environment's overlay does not install.
    """
    folder = ensure_overlay(environment_pins(result, len(result.changes)), pip_options(result), cache_root)
    result.changes = order_changes(result.changes, requirements_in(folder, {c.name for c in result.changes}))
    return result.changes


def _known_probe(known: KnownVerdict, role: ProbeRole, label: str, check: Check | None) -> Probe:
    run = ProbeRun(revision=label, run_id=known.run_id, run_dir=known.run_dir, flow_run_id=None,
                   environment=f"the run's own ({label})", summary=known.summary, log_tail=known.log_tail, wall_s=0.0)
    return as_probe(run, role, f"its recorded verdict: {known.summary.verdict}", check)


def bisect_environments(result: EnvBisectResult, probe: Callable[[int, ProbeRole], ProbeRun]) -> EnvBisectResult:
    """The endpoints (a run's verdict kept, else probed), then the search (module docstring, 3), filling ``result``;
    returns it with its status set (``found``, ``ambiguous`` or ``refused``; an error or a cancel propagates)."""
    n = len(result.changes)

    def probe_and_judge(k: int, role: ProbeRole) -> Probe:
        run = probe(k, role)
        try:
            if result.check is None:
                result.check = learn_check(run.summary, run.log_tail, run.why or "", bad=BAD)
        finally:
            row = as_probe(run, role, changes_text(result.changes[:k]), result.check).model_copy(
                update={"revision": f"env-{k}"})  # every probe runs result.revision: the table names the environment
            result.probes.append(row)
        return row

    try:
        if result.bad_run is not None:
            result.check = learn_check(result.bad_run.summary, result.bad_run.log_tail, bad=BAD)
            result.probes.append(_known_probe(result.bad_run, "bad", f"env-{n}", result.check))
        else:
            probe_and_judge(n, "bad")
        good = (_known_probe(result.good_run, "good", "env-0", result.check) if result.good_run is not None
                else probe_and_judge(0, "good"))
        if result.good_run is not None:
            result.probes.append(good)
        if good.verdict != "good":
            raise BisectRefused(f"good: {result.good.label} did not pass ({good.verdict}: {good.reason or 'no reason'}) "
                                f"where bad fails {result.check}; fix: pass an older good environment whose run passes")
    except BisectRefused as refused:
        result.status, result.reason = "refused", str(refused)
        return result
    lo, hi, skipped = 0, n, set()
    while untried := [k for k in range(lo + 1, hi) if k not in skipped]:
        k = min(untried, key=lambda c: (abs(c - (lo + hi) / 2), c))
        verdict = probe_and_judge(k, "step").verdict
        if verdict == "good":
            lo = k
        elif verdict == "bad":
            hi = k
        else:
            skipped.add(k)
    if hi == lo + 1:
        result.status, result.first_bad = "found", result.changes[lo]
    else:
        result.status, result.candidates = "ambiguous", result.changes[lo:hi]
        result.reason = (f"only skipped environments are left: the change is one of {hi - lo} "
                         f"({', '.join(map(str, result.changes[lo:hi]))})")
    return result


def changes_text(changes: list[PackageChange]) -> str:
    """What an environment has over good: ``good`` for no change, ``a 1 -> 2`` for one, ``3 changes, the last
    +b 3`` for more."""
    if len(changes) < 2:
        return str(changes[0]) if changes else "good"
    return f"{len(changes)} changes, the last {changes[-1]}"


def new_env_result(inputs: EnvBisectInputs, folder: BisectFolder) -> EnvBisectResult:
    """The result of a bisect over environments about to start in ``folder``."""
    return EnvBisectResult(**inputs.model_dump(), bisect_id=folder.root.name, folder=str(folder.root))
