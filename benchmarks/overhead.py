"""What the qwen3-scenario flow costs beyond the work it runs: the flow against the same work done bare.

    .venv/bin/python benchmarks/overhead.py                       # steps 5, 10, 20; 2 pairs per server mode
    .venv/bin/python benchmarks/overhead.py --quick               # smoke: one step count, one pair per mode
    .venv/bin/python benchmarks/overhead.py --out overhead.md     # the tables as markdown too

Every flow is a real ``titanflow run native --target cpu`` (random init, golden workload but ``--steps``), one at a
time, each with a run id of its own and a fresh ``TMPDIR``; the flows of one server mode share a ``PREFECT_HOME``,
as a user's runs do (Prefect's cache answers what it answers on a user's second run: torchtitan's config, the
warm-up), after one unmeasured run per mode that fills it; the asset and compile caches (``.cache``) are the
project's.

- **flow / bare**: a pair is one flow run and the same work bare: *bare train* is the run's own ``job/launch.sh``
  (titanflow.launch.render) run again by ``bash``, after the run's ``train/`` was moved to ``train.flow`` (so
  torchtitan starts in an empty dump folder; its output is kept as ``train.bare``, the flow's put back); *bare
  validate* is a Python process that loads the run's export with ``transformers.AutoModelForCausalLM`` and runs one
  forward (timed with its imports). Ratio = median flow wall / median (bare train + bare validate), per server mode:
  *running* (``PREFECT_API_URL`` of a Prefect server started here before the runs) and *temporary* (no
  ``PREFECT_API_URL``: the command starts and stops its own server).
- **fixed + per-step**: the running-server flow's wall at each ``--steps`` count, fitted by least squares
  (``numpy.polyfit``) to ``wall = fixed + per_step x steps``.
- **tokens/s flow / bare**: median per-rank tokens/s of steps >= 3 (torchtitan's step lines,
  titanflow.launch.metrics) of the flow's train.log over the bare launch's log, medians over the pairs.
- **validate peak RSS**: benchmarks/validate_memory.py's rows (:func:`validate_memory`; ``--quick``: 0.1 GB only).
- **phases**: one running-server and one temporary-server flow run cut into before the flow (process start to the
  summary's ``started_at``), each task's seconds (summary.json ``timings_s``; ``compare_history``,
  ``append_history`` and ``report``, which the summary does not time, from the Prefect API where the server is still
  up), the wait for the training slot, after the flow (the last task's end to process exit) and what is left
  (unaccounted: inside the flow, outside every timed task). The rows sum to the wall time.

Wall times are this machine's at the time of the run: compare the rows of one run, not figures of two.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.launch.metrics import run_curve  # noqa: E402
from titanflow.prefect_ops.local_server import temporary_server  # noqa: E402
from titanflow.record.summary import RunSummary, read_summary  # noqa: E402
from titanflow.report.markdown import markdown_table  # noqa: E402
from titanflow.task_names import TaskName  # noqa: E402

TITANFLOW = REPO / ".venv" / "bin" / "titanflow"
PYTHON = REPO / ".venv" / "bin" / "python"
#: The server modes: name -> whether the runs get PREFECT_API_URL of a server started before them.
MODES = {"running": True, "temporary": False}
#: Tokens/s is compared from this step on: steps 1-2 carry torchtitan's warm-up (first allocations, lr warm-up).
TPS_FIRST_STEP = 3
#: The tasks the flow runs after its last timed task (flows/scenario.judge_against_history): not in timings_s.
UNTIMED_TASKS = (TaskName.compare_history, TaskName.append_history, TaskName.report)
#: --quick: the export sizes (GB) validate memory is measured at (the smallest of benchmarks/validate_memory.py).
QUICK_MEMORY_SIZES_GB = [0.1]
#: Printed under the tables: why the temporary server's phases lack the untimed tasks.
PHASES_NOTE = ("Phases: the temporary server ends with its command, so its run's compare_history, append_history and "
               "report are not read back; their seconds are in its unaccounted (the first two) and after the flow.")
#: Goals, as agreed for the product: flow / bare with each server mode, the fixed cost of a run (s),
#: tokens/s flow / bare, validate peak RSS against the export's size (bytes).
GOAL_RATIO = {"running": 1.10, "temporary": 1.20}
GOAL_FIXED_S = 35.0
GOAL_TPS_RATIO = 0.98
GOAL_RSS = (1.3, 0.1e9)  # peak RSS <= 1.3 x export bytes + 0.1 GB
#: Bare validate: the export loaded as transformers loads it, one forward of 16 tokens, finite logits.
BARE_VALIDATE = """\
import sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
with torch.no_grad():
    logits = model(torch.arange(16).unsqueeze(0)).logits
assert torch.isfinite(logits).all(), "non-finite logits"
"""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class Timed:
    """One command: when it started (UTC) and its wall time (s, monotonic clock)."""

    started: datetime.datetime
    wall_s: float

    @property
    def ended(self) -> datetime.datetime:
        """``started`` + ``wall_s``: the exit on the same clock as the start."""
        return self.started + datetime.timedelta(seconds=self.wall_s)


def timed(argv: list[str], env: dict[str, str], log: Path) -> Timed:
    """Run ``argv`` from the repository root, its output into ``log``; returns when and how long it ran.

    Raises:
        RuntimeError: the command exited non-zero, with the end of its log.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        started, clock = _utcnow(), time.monotonic()
        code = subprocess.run(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode
        wall = time.monotonic() - clock
    if code:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {code}; log {log}:\n{tail}")
    return Timed(started, wall)


@dataclass
class FlowRun:
    """One ``titanflow run`` and what it wrote."""

    mode: str
    steps: int
    run_dir: Path
    command: Timed
    summary: RunSummary
    api_url: str | None  # the running server's, to read task runs back; None for the temporary server


@dataclass
class Pair:
    """A flow run and its work done bare: bare train (s), bare validate (s), median tokens/s of both."""

    flow: FlowRun
    bare_train_s: float
    bare_validate_s: float
    tps_flow: float
    tps_bare: float

    @property
    def bare_s(self) -> float:
        return self.bare_train_s + self.bare_validate_s


class Bench:
    """Where the runs go (``work``) and the environment each command gets."""

    def __init__(self, work: Path):
        self.work = work
        self.runs = work / "runs"
        self.made: list[Path] = []

    def env(self, name: str, api_url: str | None, home: str | None = None) -> dict[str, str]:
        """The environment of one command named ``name``: the PREFECT_HOME named ``home`` (None: its own), a fresh
        TMPDIR, the benchmark's own history, offline Hub, ``.venv/bin`` first on PATH (launch.sh calls
        ``torchrun``); PREFECT_API_URL only when given."""
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        home, tmp = self.work / "prefect-homes" / (home or name), self.work / "tmp" / name
        tmp.mkdir(parents=True, exist_ok=True)
        env |= {"PREFECT_HOME": str(home), "TMPDIR": str(tmp), "TITANFLOW_HISTORY": str(self.work / "history"),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                "PATH": os.pathsep.join([str(TITANFLOW.parent), env.get("PATH", "")])}
        return env | ({"PREFECT_API_URL": api_url} if api_url else {})

    def flow(self, mode: str, steps: int, index: int, api_url: str | None) -> FlowRun:
        """One ``titanflow run native --target cpu --steps <steps>``, run id ``<mode>-s<steps>-<index>``.

        Raises:
            RuntimeError: the run failed (its verdict is not pass, or the command could not run).
        """
        run_id = f"{mode}-s{steps}-{index}"
        run_dir = self.runs / run_id
        self.made.append(run_dir)
        print(f"flow {run_id} ...", flush=True)
        command = timed([str(TITANFLOW), "run", "native", "--target", "cpu", "--steps", str(steps), "--runs-dir",
                         str(self.runs), "--run-id", run_id], self.env(run_id, api_url, home=mode),
                        self.work / "logs" / f"{run_id}.flow.log")
        return FlowRun(mode, steps, run_dir, command, read_summary(run_dir / "summary.json"), api_url)

    def bare(self, flow: FlowRun) -> Pair:
        """The flow run's work done bare: its launch.sh into an empty ``train/`` (the flow's moved to
        ``train.flow`` and put back after, the bare one kept as ``train.bare``), then :data:`BARE_VALIDATE` on its
        export."""
        run_dir, name = flow.run_dir, flow.run_dir.name
        print(f"bare {name} ...", flush=True)
        train, flow_train, bare_train = run_dir / "train", run_dir / "train.flow", run_dir / "train.bare"
        train.rename(flow_train)
        try:
            log = self.work / "logs" / f"{name}.bare-train.log"
            trained = timed(["bash", str(run_dir / "job" / "launch.sh")], self.env(f"{name}-bare", None), log)
        finally:
            if train.exists():
                train.rename(bare_train)
            flow_train.rename(train)
        export_dir = flow.summary.export.export_dir
        validated = timed([str(PYTHON), "-c", BARE_VALIDATE, export_dir], self.env(f"{name}-bare", None),
                          self.work / "logs" / f"{name}.bare-validate.log")
        return Pair(flow, trained.wall_s, validated.wall_s, median_tps(run_curve(run_dir / "train.log")),
                    median_tps(run_curve(log)))

    def clean(self) -> None:
        """Remove the run folders this benchmark made and the per-command homes and temporary folders."""
        for path in [*self.made, self.work / "prefect-homes", self.work / "tmp"]:
            shutil.rmtree(path, ignore_errors=True)


def median_tps(curve: pd.DataFrame, first_step: int = TPS_FIRST_STEP) -> float:
    """Median per-rank tokens/s of the steps >= ``first_step`` of a run's curve (titanflow.launch.metrics.COLUMNS).

    Raises:
        ValueError: no step >= ``first_step`` was logged (run at least that many steps).
    """
    tps = curve.loc[curve.step >= first_step, "tps"]
    if tps.empty:
        raise ValueError(f"steps: no step >= {first_step} logged; tokens/s is compared from step {first_step}")
    return float(tps.median())


def fit_fixed_per_step(steps: list[int], walls_s: list[float]) -> tuple[float, float]:
    """Least-squares ``wall = fixed + per_step x steps`` (``numpy.polyfit``, degree 1): (fixed s, per_step s).

    Raises:
        ValueError: fewer than 2 distinct step counts, or lists of different lengths.
    """
    if len(steps) != len(walls_s):
        raise ValueError(f"steps and walls: {len(steps)} step counts for {len(walls_s)} wall times")
    if len(set(steps)) < 2:
        raise ValueError(f"--steps: the fit needs at least 2 distinct step counts, got {steps}")
    per_step, fixed = np.polyfit(np.asarray(steps, float), np.asarray(walls_s, float), 1)
    return float(fixed), float(per_step)


def prefect_task_spans(api_url: str, flow_run_id: str) -> dict[str, tuple[datetime.datetime, datetime.datetime]]:
    """Start and end (UTC) of the flow run's :data:`UNTIMED_TASKS`, from Prefect's REST API (``POST
    /task_runs/filter``); a task run is named ``<task name>-<suffix>`` by Prefect. Task runs not ended are left out."""
    found = httpx.post(f"{api_url}/task_runs/filter", timeout=10,
                       json={"flow_runs": {"id": {"any_": [flow_run_id]}}}).raise_for_status().json()
    spans = {}
    for task_run in found:
        name = task_run["name"].rsplit("-", 1)[0]
        if name in UNTIMED_TASKS and task_run.get("start_time") and task_run.get("end_time"):
            spans[name] = (datetime.datetime.fromisoformat(task_run["start_time"]),
                           datetime.datetime.fromisoformat(task_run["end_time"]))
    return spans


def phase_rows(summary: RunSummary, command: Timed,
               untimed: dict[str, tuple[datetime.datetime, datetime.datetime]]) -> list[tuple[str, float]]:
    """The flow command's wall time cut into phases, (name, seconds) in run order, summing to ``command.wall_s``:

    - ``before the flow``: process start to the summary's ``started_at`` (interpreter, imports, server, prepare);
    - each task of ``timings_s``, then ``slot wait`` (``slot_wait_s``) when there was one;
    - each task of ``untimed`` (start, end; e.g. :func:`prefect_task_spans`) as its duration, by start;
    - ``unaccounted``: the rest inside the flow, between ``started_at`` and the last task's end;
    - ``after the flow``: the last task's end (the latest of ``untimed``'s ends and the summary's
      ``finished_at``, its last write) to process exit.

    Raises:
        ValueError: the summary has no ``started_at`` / ``finished_at`` (a run killed before its end).
    """
    if summary.started_at is None or summary.finished_at is None:
        raise ValueError(f"summary of {summary.run_id}: started_at/finished_at missing; the run did not end")
    last_end = max([summary.finished_at, *(end for _, end in untimed.values())])
    before = (summary.started_at - command.started).total_seconds()
    after = (command.ended - last_end).total_seconds()
    rows = [("before the flow", before), *summary.timings_s.items()]
    rows += [("slot wait", summary.slot_wait_s)] if summary.slot_wait_s else []
    rows += [(name, (end - start).total_seconds()) for name, (start, end) in sorted(untimed.items(),
                                                                                   key=lambda item: item[1][0])]
    rows.append(("unaccounted", command.wall_s - before - after - sum(seconds for _, seconds in rows[1:])))
    rows.append(("after the flow", after))
    return rows


def validate_memory(sizes_gb: list[float] | None) -> list[dict] | str:
    """Validate peak RSS against bare load per export size: ``measure_rows(sizes_gb)`` of
    benchmarks/validate_memory.py (None: its default sizes), each row carrying ``export_bytes`` and
    ``validate_peak_rss_bytes``; or why it was not measured (the script, or that function, is not there)."""
    if not (REPO / "benchmarks" / "validate_memory.py").is_file():
        return "not measured: benchmarks/validate_memory.py absent"
    import validate_memory as measure  # benchmarks/ is on the path: this script's own folder

    if not hasattr(measure, "measure_rows"):
        return "not measured: benchmarks/validate_memory.py has no measure_rows(sizes_gb) to call"
    return measure.measure_rows(sizes_gb)


def rss_goal_met(rows: list[dict]) -> tuple[str, bool]:
    """The worst validate peak RSS against :data:`GOAL_RSS` over ``rows`` of :func:`validate_memory`: a cell
    and whether every row meets it."""
    worst = max(rows, key=lambda r: r["validate_peak_rss_bytes"] / (GOAL_RSS[0] * r["export_bytes"] + GOAL_RSS[1]))
    limit = GOAL_RSS[0] * worst["export_bytes"] + GOAL_RSS[1]
    return (f"{worst['validate_peak_rss_bytes'] / 1e9:.2f} GB for {worst['export_bytes'] / 1e9:.2f} GB "
            f"(limit {limit / 1e9:.2f} GB)", all(r["validate_peak_rss_bytes"] <= GOAL_RSS[0] * r["export_bytes"]
                                                  + GOAL_RSS[1] for r in rows))


def measures(pairs: dict[str, list[Pair]], fit: tuple[float, float] | None, memory: list[dict] | str) -> list[dict]:
    """The score table: measure | value | goal | met."""
    def row(measure, value, goal, met):
        return {"measure": measure, "value": value, "goal": goal, "met": "-" if met is None else
                ("yes" if met else "no")}

    rows = []
    for mode, its in pairs.items():
        flow = statistics.median(p.flow.command.wall_s for p in its)
        bare = statistics.median(p.bare_s for p in its)
        rows.append(row(f"flow / bare, {mode} server", f"{flow / bare:.2f} ({flow:.1f} s / {bare:.1f} s, "
                        f"{len(its)} pair(s), {its[0].flow.steps} steps)", f"<= {GOAL_RATIO[mode]:.2f}",
                        flow / bare <= GOAL_RATIO[mode]))
    if fit is None:
        rows.append(row("fixed cost per run (s)", "not measured: one step count (--quick)", f"<= {GOAL_FIXED_S:.0f}",
                        None))
        rows.append(row("per-step cost (s/step)", "not measured: one step count (--quick)", "", None))
    else:
        rows.append(row("fixed cost per run (s)", f"{fit[0]:.1f}", f"<= {GOAL_FIXED_S:.0f}", fit[0] <= GOAL_FIXED_S))
        rows.append(row("per-step cost (s/step)", f"{fit[1]:.2f}", "", None))
    every = [p for its in pairs.values() for p in its]
    tps_flow, tps_bare = (statistics.median(getattr(p, k) for p in every) for k in ("tps_flow", "tps_bare"))
    rows.append(row(f"tokens/s flow / bare (steps >= {TPS_FIRST_STEP})",
                    f"{tps_flow / tps_bare:.3f} ({tps_flow:.0f} / {tps_bare:.0f} per rank)",
                    f">= {GOAL_TPS_RATIO}", tps_flow / tps_bare >= GOAL_TPS_RATIO))
    goal = f"<= {GOAL_RSS[0]}x export + {GOAL_RSS[1] / 1e9:.1f} GB"
    if isinstance(memory, str):
        rows.append(row("validate peak RSS / export", memory, goal, None))
    else:
        cell, met = rss_goal_met(memory)
        rows.append(row("validate peak RSS / export", cell, goal, met))
    return rows


def pair_rows(pairs: dict[str, list[Pair]]) -> list[dict]:
    """One row per pair: walls (s), the flow's own train task (s) and both tokens/s."""
    return [{"server": mode, "run": p.flow.run_dir.name, "steps": p.flow.steps,
             "flow s": f"{p.flow.command.wall_s:.1f}", "flow train task s": f"{p.flow.summary.train.wall_s:.1f}",
             "bare train s": f"{p.bare_train_s:.1f}", "bare validate s": f"{p.bare_validate_s:.1f}",
             "flow / bare": f"{p.flow.command.wall_s / p.bare_s:.2f}", "tokens/s flow": f"{p.tps_flow:.0f}",
             "tokens/s bare": f"{p.tps_bare:.0f}"} for mode, its in pairs.items() for p in its]


def phases_table(runs: list[FlowRun]) -> list[dict]:
    """:func:`phase_rows` of each run side by side (one column per run, seconds), a total row last."""
    columns = {}
    for run in runs:
        untimed = prefect_task_spans(run.api_url, run.summary.flow_run_id) if run.api_url else {}
        columns[f"{run.run_dir.name} s"] = dict(phase_rows(run.summary, run.command, untimed))
    names = list(dict.fromkeys(name for column in columns.values() for name in column))
    names = [n for n in names if n != "after the flow"] + ["after the flow"]
    rows = [{"phase": name} | {col: "" if name not in values else f"{values[name]:.1f}"
                               for col, values in columns.items()} for name in names]
    rows.append({"phase": "total (wall)"} | {col: f"{sum(values.values()):.1f}" for col, values in columns.items()})
    return rows


def parse_steps(text: str) -> list[int]:
    """``"5,10,20"`` -> [5, 10, 20].

    Raises:
        argparse.ArgumentTypeError: not comma-separated integers >= TPS_FIRST_STEP.
    """
    try:
        steps = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps: comma-separated integers, e.g. 5,10,20; got {text!r}") from None
    if min(steps) < TPS_FIRST_STEP:
        raise argparse.ArgumentTypeError(f"--steps: each at least {TPS_FIRST_STEP} (tokens/s is compared from step "
                                         f"{TPS_FIRST_STEP}); got {text!r}")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=parse_steps, default=[5, 10, 20],
                        help="step counts of the fit, comma-separated (default 5,10,20); pairs run at the first")
    parser.add_argument("--pairs", type=int, default=2, help="flow + bare pairs per server mode (default 2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: the first step count only, one pair per "
                        "server mode, no fit")
    parser.add_argument("--out", type=Path, help="also write the tables as markdown to this file")
    parser.add_argument("--work", type=Path, help="where runs, logs and homes go (default: a temporary folder)")
    parser.add_argument("--keep", action=argparse.BooleanOptionalAction, default=True,
                        help="keep the run folders made (default); --no-keep removes them at the end")
    args = parser.parse_args()
    steps, n_pairs = (args.steps[:1], 1) if args.quick else (args.steps, args.pairs)
    if n_pairs < 1:
        parser.error("--pairs: at least 1")
    if not args.quick and len(set(steps)) < 2:
        parser.error("--steps: the fit needs at least 2 distinct step counts (or --quick)")
    if args.out and not args.out.parent.is_dir():
        parser.error(f"--out: folder {args.out.parent} does not exist")
    work = args.work or Path(tempfile.mkdtemp(prefix="titanflow-overhead-"))
    bench = Bench(work)
    pair_steps = steps[0]
    pairs: dict[str, list[Pair]] = {mode: [] for mode in MODES}
    fit_runs: list[FlowRun] = []
    os.environ.update(PREFECT_HOME=str(work / "server-prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                      DO_NOT_TRACK="1")
    with temporary_server(work / "server-prefect" / "server.log") as api_url:
        for mode in MODES:  # unmeasured: each mode's PREFECT_HOME gets what a user's first run leaves
            bench.flow(mode, 3, 0, api_url if mode == "running" else None)
        for count in steps:  # the fit's runs; the one at pair_steps is the first running pair's flow
            fit_runs.append(bench.flow("running", count, 1, api_url))
        pairs["running"].append(bench.bare(fit_runs[0]))
        for index in range(2, n_pairs + 1):
            pairs["running"].append(bench.bare(bench.flow("running", pair_steps, index, api_url)))
        phase_runs = [fit_runs[0]]
        for index in range(1, n_pairs + 1):
            pairs["temporary"].append(bench.bare(bench.flow("temporary", pair_steps, index, None)))
        phase_runs.append(pairs["temporary"][0].flow)
        phases = phases_table(phase_runs)  # the running server answers for its task runs
    fit = None if args.quick else fit_fixed_per_step([r.steps for r in fit_runs],
                                                     [r.command.wall_s for r in fit_runs])
    memory = validate_memory(QUICK_MEMORY_SIZES_GB if args.quick else None)
    sections = [("Measures", measures(pairs, fit, memory)), ("Pairs", pair_rows(pairs)),
                ("Phases of a flow run per server mode (s)", phases)]
    if not args.quick:
        sections.append(("Fit points (running server)", [{"steps": r.steps, "flow s": f"{r.command.wall_s:.1f}"}
                                                          for r in fit_runs]))
    if not isinstance(memory, str):
        sections.append(("Validate memory (benchmarks/validate_memory.py)", memory))
    text = "\n\n".join(f"## {title}\n\n{markdown_table(rows)}" for title, rows in sections)
    text += f"\n\n{PHASES_NOTE}"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.keep:
        print(f"\nruns, logs and homes: {work}")
    else:
        bench.clean()


if __name__ == "__main__":
    main()
