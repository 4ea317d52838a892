"""Resume a run: continue a failed, cancelled or killed run in its own folder.

    titanflow run --resume native-cpu-random-20261201-101500-3f2a        # or the flow parameter resume=<id>

A resumed run is the same run: the parameters its ``summary.json`` recorded (written when the run starts, so a
killed run has them too), the job its ``job/job.json`` holds and the same weights. Its train task goes on from
the newest complete step checkpoint (titanflow.launch.resume: torchtitan restores step, lr schedule and data
position), ``train.log`` and ``metrics.csv`` go on from that step, and its ``summary.json`` and history row
replace the earlier ones, saying how often and from which step it was resumed (``resumed``). A retried flow run
(the UI's Retry) continues the run folder it made the same way (:func:`own_run_folder`).

Refused before anything runs, each message naming the field and the fix (:func:`resumed_run`): a run folder that
does not exist or has no summary.json, a run that passed, parameters that change the job (all but
:data:`CHANGEABLE`; the differing ones are named), a run that is still training. After the weights are pulled,
a job that would render differently (the weights folder or its content changed, say) is refused before the job
files are written (:meth:`Resumption.check_job`).
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import ValidationError

from titan_cfg.job import CHECKPOINT_FOLDER, JOB_FILE, Job
from titanflow import paths
from titanflow.launch.render import make_job
from titanflow.launch.slurm.job import running_jobs
from titanflow.launch.step_checkpoint import SET_ASIDE, set_aside, set_aside_folders
from titanflow.params import RUN_ID_MAX, RUN_ID_PATTERN, ScenarioRun, check_resumed_id
from titanflow.record.summary import SUMMARY, Continuation, RunSummary, read_summary
from titanflow.run.preflight import preflight

#: Parameters a resumed run may give other values: they do not change the job (each launch's time limit; a start
#: from step 1 when no intact step checkpoint is left).
CHANGEABLE = ("timeout_s", "from_step_1")
#: Parameters that are this continuation's own choice, never taken from the record of an earlier one.
ASKED_EACH_TIME = ("from_step_1",)
#: Parameters that name the run rather than its job.
NAMING = ("resume", "run_id", "runs_dir")


@dataclass(frozen=True)
class Resumption:
    """A run about to be continued: the run as it was asked for, its folder, its last summary and job."""

    run: ScenarioRun
    run_dir: Path
    previous: RunSummary
    previous_job: Job | None
    from_step: int | None

    def continuation(self, flow_run_id: str | None) -> Continuation:
        """This continuation, by the flow run ``flow_run_id``, as the summary records it."""
        said = self.previous.reason or self.previous.error
        return Continuation(flow_run_id=flow_run_id, previous_flow_run_id=self.previous.flow_run_id,
                            previous_verdict=self.previous.verdict, previous_reason=said[:500] if said else None,
                            from_step=self.from_step, at=datetime.datetime.now(datetime.UTC))

    def check_job(self, weights_dir: Path, weights_digest: str | None = None) -> None:
        """Refuse to continue when the job rendered now from ``weights_dir`` would differ from the one the run
        trained (its job.json), or the weights' content hash from the one its summary recorded. Writes nothing.

        Raises:
            ValueError: ``resume: ...``, naming each differing field with both values.
        """
        differing = []
        if weights_digest and self.previous.weights_digest and weights_digest != self.previous.weights_digest:
            differing.append(f"weights_digest {self.previous.weights_digest} -> {weights_digest}")
        if self.previous_job is not None:
            before = self.previous_job.model_dump(mode="json")
            now = make_job(self.run, weights_dir, self.run_dir).model_dump(mode="json")
            differing += [f"{name} {before.get(name)!r} -> {now.get(name)!r}" for name in sorted(set(before) | set(now))
                          if before.get(name) != now.get(name)]
        if differing:
            raise ValueError(f"resume: run {self.run_dir.name} trained another job than the one rendered now: "
                             f"{'; '.join(differing)}. Its step checkpoints belong to that job; fix: restore what "
                             "changed, or start a new run without --resume")


def newest_complete_step(checkpoint_folder: Path) -> int | None:
    """The step of the newest complete step checkpoint in ``checkpoint_folder`` (titanflow.launch.resume), None
    when there is none."""
    from titanflow.launch.resume import step_folders, why_incomplete  # lazy: pandas (via titanflow.launch.metrics)

    complete = [step for step, folder in step_folders(checkpoint_folder).items() if why_incomplete(folder) is None]
    return max(complete) if complete else None


def live_processes(run_dir: Path) -> list[psutil.Process]:
    """Processes of this machine, this one aside, whose command line or environment names a path inside
    ``run_dir``: a training of the run (torchrun's ``--log-dir``, the ranks' ``TITANFLOW_JOB``)."""
    inside = f"{run_dir.resolve()}{os.sep}"
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            named = " ".join([*proc.cmdline(), *proc.environ().values()])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if inside in named:
            found.append(proc)
    return found


def _field_flag(name: str) -> str:
    """How the command line gives field ``name``: ``--steps``; the scenario is the positional argument."""
    return "the scenario argument" if name == "scenario" else f"--{name.replace('_', '-')}"


def resumed_run(given: dict) -> Resumption:
    """The run ``given["resume"]`` names, checked (module docstring), with the parameters it recorded and those of
    ``given`` (the parameters given, None left out) that may change (:data:`CHANGEABLE`).

    Raises:
        ValueError: the message starts with the field to change (``resume``, or a differing parameter's).
    """
    run_id = given["resume"]
    if not re.fullmatch(RUN_ID_PATTERN, run_id) or len(run_id) > RUN_ID_MAX:
        raise ValueError(f"resume: {run_id!r} is not a run id (a folder name of at most {RUN_ID_MAX} letters, digits, "
                         "'.', '_', '-'); fix: pass the id `titanflow run` printed")
    check_resumed_id(run_id, given.get("run_id"))
    root = Path(given["runs_dir"]).resolve() if given.get("runs_dir") else paths.runs_root()
    run_dir = root / run_id
    if not run_dir.is_dir():
        raise ValueError(f"resume: no run folder {run_dir}; fix: pass the id of a run under {root} (--runs-dir names "
                         "another parent)")

    if not (run_dir / SUMMARY).is_file():
        raise ValueError(f"resume: {run_dir} has no {SUMMARY}, so the run's parameters are unknown; fix: start a new "
                         "run without --resume")
    try:
        previous = read_summary(run_dir / SUMMARY)
    except ValidationError as err:  # not JSON, or not a titanflow summary: pydantic's first error, without its links
        first = err.errors()[0]
        said = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first["loc"] else first["msg"]
        raise ValueError(f"resume: {run_dir / SUMMARY} is not a titanflow summary ({said}), so the run's parameters "
                         "are unknown; fix: start a new run without --resume") from None
    if previous.verdict == "pass":
        raise ValueError(f"resume: run {run_id} passed; there is nothing to continue; fix: start a new run "
                         "without --resume")
    recorded = {k: v for k, v in previous.parameters.items()
                if v is not None and k in ScenarioRun.model_fields and k not in (*NAMING, *ASKED_EACH_TIME)}
    kept = ScenarioRun.model_validate(recorded)
    asked = ScenarioRun.model_validate({**recorded, **{k: v for k, v in given.items()
                                                       if k not in (*NAMING, *ASKED_EACH_TIME)}})
    differing = [name for name in given if name not in (*NAMING, *CHANGEABLE)
                 and getattr(asked, name) != getattr(kept, name)]
    if differing:
        said = "; ".join(f"{name} {getattr(asked, name)!r}, not its {getattr(kept, name)!r}" for name in differing)
        raise ValueError(f"{differing[0]}: run {run_id} is resumed with {said}. A resumed run trains the same job; "
                         f"fix: drop {', '.join(_field_flag(n) for n in differing)} (only "
                         f"{', '.join(_field_flag(n) for n in CHANGEABLE)} may change), or start a new run without "
                         "--resume to change them")
    run = ScenarioRun.model_validate({**recorded, **{k: given[k] for k in CHANGEABLE if k in given},
                                      "resume": run_id, "run_id": run_id, "runs_dir": str(root)})
    preflight(run)
    live = live_processes(run_dir)
    if live:
        pids = ", ".join(f"{p.pid} ({p.name()})" for p in live[:5])
        jobs = running_jobs(run_dir / "train" / "nodes") if (run_dir / "train" / "nodes").is_dir() else []
        if jobs:  # a Slurm job trains on after its flow process died: only Slurm can end it
            raise ValueError(f"resume: run {run_id} is still running: its Slurm job(s) {', '.join(jobs)} (processes "
                             f"{pids}); fix: wait for them to end, or end them with: scancel {' '.join(jobs)}; then resume "
                             "(the steps they log are taken into the run's curve)")
        raise ValueError(f"resume: run {run_id} is still running (processes {pids}); fix: wait for it to end, or cancel "
                         f"it (prefect flow-run cancel {previous.flow_run_id}; Ctrl-C of its titanflow run)")
    job_path = run_dir / "job" / JOB_FILE
    previous_job = Job.read(job_path) if job_path.is_file() else None
    checkpoints = (Path(previous_job.dump_folder) if previous_job else run_dir / "train") / CHECKPOINT_FOLDER
    return Resumption(run=run, run_dir=run_dir, previous=previous, previous_job=previous_job,
                      from_step=intact_step(checkpoints, run))


def intact_step(checkpoints: Path, run: ScenarioRun) -> int | None:
    """The step the resumed ``run`` goes on from: its newest intact step checkpoint in ``checkpoints``
    (titanflow.launch.resume.newest_intact; the damaged ones newer than it are set aside when it launches), None when
    it has none and starts at step 1.

    Raises:
        ValueError: ``resume: ...``: every complete step checkpoint is damaged, or was set aside as damaged, and no
            intact one is left, while ``run.from_step_1`` is false; the message names them and the fix. With it true,
            the damaged ones are set aside now (kept, titanflow.launch.step_checkpoint) and the run starts at step 1.
    """
    from titanflow.launch.resume import newest_intact, no_intact_message  # lazy: pandas (via titanflow.launch.metrics)

    step, broken = newest_intact(checkpoints)
    if step is not None:
        return step
    before = [f"{CHECKPOINT_FOLDER}/{SET_ASIDE}/{p.name}" for p in set_aside_folders(checkpoints)]
    if not broken and not before:
        return None
    if not run.from_step_1:
        named = [f"{CHECKPOINT_FOLDER}/{d.name} ({found.detail})" for d, found in broken] + before
        raise ValueError(f"resume: run {run.resume}: {no_intact_message(checkpoints, named, run.resume)}")
    for step_dir, found in broken:
        set_aside(step_dir, found.reason)
    return None


def own_run_folder(run: ScenarioRun, flow_run_id: str) -> Path | None:
    """The run folder flow run ``flow_run_id`` made in an earlier attempt (its summary names the flow run), for a
    retried flow run to continue; None when it made none. Looks at ``run.run_id``'s folder when given, else at
    the ``<scenario>-<target>-<init>-*`` folders of the runs folder."""
    root = run.runs_root()
    candidates = [root / run.run_id] if run.run_id else sorted(root.glob(f"{run.scenario}-{run.target}-{run.init}-*"))

    for folder in candidates:
        try:
            if read_summary(folder / SUMMARY).flow_run_id == flow_run_id:
                return folder
        except (OSError, ValueError):  # no summary, or not a titanflow one: not this flow run's
            continue
    return None


def end_previous_flow_run(previous_flow_run_id: str | None, flow_run_id: str) -> str | None:
    """Set the resumed run's earlier flow run Crashed when Prefect still shows it running: its processes are gone
    (:func:`resumed_run` checked), as a worker marks a flow run whose process died, which a `titanflow run` killed
    outright has no worker to do. Its training slot is then freed at once instead of when its lease expires (up to
    two minutes of waiting for itself). Nothing happens for the flow run itself (a retry in place), an unknown or
    already final one. Returns the state name set, or None.
    """
    if not previous_flow_run_id or previous_flow_run_id == flow_run_id:
        return None
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        try:
            state = client.read_flow_run(previous_flow_run_id).state
        except Exception:  # noqa: BLE001 - another server's flow run (a temporary one): nothing to end here
            return None
        if state is None or state.is_final():
            return None
        client.set_flow_run_state(previous_flow_run_id, Crashed(
            message=f"its processes are gone; run {flow_run_id} resumes it"), force=True)
    return "Crashed"
