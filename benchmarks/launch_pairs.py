"""Two settings of one training launch, run alternately and compared: what benchmarks/malloc_hugepages.py and
benchmarks/launch_phases.py share.

Each renders the native cpu job (:func:`render`), writes a second ``launch.sh`` for the other setting, runs both by
``bash`` in turn (:func:`alternate`, each launch in an empty dump folder: :func:`launch`) and prints the medians per
setting side by side with their ratio, and whether every launch logged the same losses (:func:`print_comparison`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from titanflow.launch.metrics import log_lines, parse_step_line  # noqa: E402
from titanflow.report.markdown import markdown_table  # noqa: E402


@contextlib.contextmanager
def work_folder(given: Path | None, prefix: str) -> Iterator[Path]:
    """The folder a benchmark renders, launches and logs into: ``given`` (``--work``), kept, else a temporary one
    (a run's folders hold a few hundred MB of checkpoints), removed at the end, its logs with it."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        print(f"job, logs and checkpoints kept in {given}")
        return
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(work: Path, steps: int) -> Path:
    """The native cpu job (random init, the embedded tiny model, ``steps`` steps) rendered to run, in ``work``;
    returns its job folder (titanflow.launch.render)."""
    from titanflow.assets import ensure_assets
    from titanflow.launch.render import render as render_job
    from titanflow.params import ScenarioRun

    weights = ensure_assets().weights_dir
    rendered = render_job(ScenarioRun(scenario="native", target="cpu", steps=steps), weights, work / "native-cpu")
    return Path(rendered.job_path).parent


def launch(script: Path, dump_folder: Path, log: Path, cwd: Path | None = None) -> dict:
    """Run ``script`` by bash (in ``cwd``; None: this process's) with an empty ``dump_folder``, its output to
    ``log``: ``start`` and ``end`` (epoch s), ``wall_s``, ``user_s`` and ``sys_s`` of the whole process tree
    (``os.wait4`` of bash), ``peak_rss_gib`` of its largest process, the log's ``lines``, and the ``losses`` of
    torchtitan's step lines (5 decimals, as it prints them).

    Raises:
        SystemExit: the script exited non-zero (names the log).
    """
    shutil.rmtree(dump_folder, ignore_errors=True)
    start = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env={
            **os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])})
        _, status, usage = os.wait4(proc.pid, 0)
    end = time.time()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{script} failed; its output is in {log}")
    lines = list(log_lines(log))  # a generator: read once, kept for every reader
    return {"start": start, "end": end, "wall_s": end - start, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
            "peak_rss_gib": usage.ru_maxrss / 2**20, "lines": lines,
            "losses": [round(r["loss"], 5) for line in lines if (r := parse_step_line(line)) is not None]}


def alternate(scripts: dict[str, tuple[Path, Path | None]], dump_folder: Path, work: Path, pairs: int,
              measure: Callable[[dict], dict]) -> dict[str, list[dict]]:
    """``pairs`` rounds of every setting in ``scripts`` (name -> (script, working directory)), in order, each a
    :func:`launch` into ``dump_folder`` logged to ``work/<first word of name>-<round>.log``; ``measure`` turns a
    launch's result into the figures kept. Returns name -> those figures, per round."""
    runs: dict[str, list[dict]] = {name: [] for name in scripts}
    for pair in range(pairs):
        for name, (script, cwd) in scripts.items():
            runs[name].append(measure(launch(script, dump_folder, work / f"{name.split()[0]}-{pair}.log", cwd)))
            print(f"pair {pair + 1}/{pairs} {name}: {runs[name][-1]['wall_s']:.1f} s", flush=True)
    return runs


def print_comparison(runs: dict[str, list[dict]], new: str, old: str, metrics: list[str], steps: int,
                     pairs: int, measure_header: str = "measure") -> None:
    """One row per metric: the median of setting ``old``, of ``new``, and new / old; then whether every launch of
    either logged ``old``'s first losses (and there were some)."""
    rows = []
    for metric in metrics:
        now, base = (statistics.median(r[metric] for r in runs[name]) for name in (new, old))
        rows.append({measure_header: metric, old: f"{base:.2f}", new: f"{now:.2f}",
                     f"{new} / {old}": f"{now / base:.2f}" if base else "-"})
    first = runs[old][0]["losses"]  # none logged would make "equal" vacuous: that reads NO
    same = bool(first) and all(r["losses"] == first for name in runs for r in runs[name])
    print(f"\nnative cpu, {steps} steps, 2 ranks, {pairs} launch(es) per setting, medians "
          f"({time.strftime('%Y-%m-%d')}):\n")
    print(markdown_table(rows))
    print(f"\nlosses equal at every step in every launch: {'yes' if same else 'NO'}")
