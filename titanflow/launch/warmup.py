"""Compile warm-up: fill the compile cache before the measured run.

With compile on, the first training step would otherwise include graph
compilation (minutes on Neuron). The warm-up runs the same job for one step
into ``runs/<id>/warmup/``, sharing the content-keyed cache folder that
training then reads (titan_cfg.compile_cache). The folder is warm when an
earlier warm-up completed there (the ``.warm`` marker, which names its run) and
the compiler's own entries are there (titan_cfg.compile_cache.cache_entries):
a marker alone means the compiler did not write where the job's variables
point, and the step is compiled again. A warm-up after which the compiler wrote
nothing there leaves no marker and says so. With compile off, nothing is
compiled ahead of time and the task records why it skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from titan_cfg.compile_cache import CACHE_ENV, cache_entries, cache_folder
from titan_cfg.job import JOB_ENV, Job
from titanflow.launch.render import RenderedJob
from titanflow.launch.torchrun import launch, launch_error, ranks_dir

WARM_MARKER = ".warm"


class WarmupResult(BaseModel):
    """What the warm-up did."""

    status: Literal["skipped", "reused", "warmed"] = Field(description="compile off / cache already warm / warmed now")
    reason: str = Field(description="why, in words")
    seconds: float = Field(description="wall seconds of the one-step compile run (0 unless warmed)")
    cache_dir: str | None = Field(description="the keyed compile-cache folder, when compile is on")

    def from_cache(self) -> WarmupResult:
        """This result as a later run of the same job gets it from Prefect's cache (tasks.warmup): it compiled
        nothing, so a ``warmed`` result reads ``reused`` and 0 s, its reason kept."""
        if self.status != "warmed":
            return self
        return self.model_copy(update={"status": "reused", "seconds": 0.0,
                                       "reason": f"Prefect's cache: an earlier run of this job warmed it ({self.reason})"})


def is_warm(folder: Path, backend: str) -> bool:
    """An earlier warm-up completed in ``folder`` (its marker) and the ``backend``'s compiler has entries there."""
    return (folder / WARM_MARKER).is_file() and cache_entries(folder, backend, ignore=(WARM_MARKER,)) > 0


def warm_up(rendered: RenderedJob, timeout_s: float, on_lines=lambda _: None) -> WarmupResult:
    """Run one compiled step unless the job's compile is off or the cache is already warm;
    ``timeout_s`` bounds the one-step launch (seconds).

    Raises:
        titanflow.launch.torchrun.TrainingError: the warm-up run failed (compile failures surface here, before
            training).
    """
    found = cache_folder(rendered.env)
    cache, backend = found if found else (None, None)
    job = Job.read(Path(rendered.job_path))
    if not job.compile:
        return WarmupResult(status="skipped", reason="compile is off: eager mode has nothing to compile ahead",
                            seconds=0.0, cache_dir=None)
    if rendered.scheduler != "local":  # the warm-up runs here, on one node; the job's nodes compile their own
        return WarmupResult(status="skipped", reason=f"a {rendered.scheduler} job: its nodes compile in the first "
                            "step, into the keyed cache folder they share", seconds=0.0,
                            cache_dir=str(cache) if cache else None)
    if cache is not None and is_warm(cache, backend):
        entries = cache_entries(cache, backend, ignore=(WARM_MARKER,))
        return WarmupResult(status="reused", reason=f"cache {cache.name} is warm ({entries} compiled entries)",
                            seconds=0.0, cache_dir=str(cache))
    warm_job = job.model_copy(update={"steps": 1, "warmup_steps": 0,
                                      "dump_folder": str(Path(rendered.run_dir) / "warmup")})
    warm_path = warm_job.write(Path(rendered.job_path).with_name("warmup_job.json"))
    result, log_path = launch(rendered, timeout_s=timeout_s, log_name="warmup.log", on_lines=on_lines,
                              extra_env={JOB_ENV: str(warm_path)})
    if result.returncode != 0 or result.timed_out:
        raise launch_error("compile_warmup", "the one-step compile run failed", result, log_path, ranks_dir(rendered))
    if cache is None:
        return WarmupResult(status="warmed", reason="one compiled step ran; the job names no compile cache",
                            seconds=result.wall_s, cache_dir=None)
    entries = cache_entries(cache, backend, ignore=(WARM_MARKER,))
    if not entries:  # the compiler did not read the variables: training will compile again
        variables = ", ".join(CACHE_ENV[backend])
        return WarmupResult(status="warmed", reason=f"one compiled step ran, but the compiler wrote nothing under "
                            f"{cache} ({variables} were not read): training compiles again", seconds=result.wall_s,
                            cache_dir=str(cache))
    (cache / WARM_MARKER).write_text(f"warmed by run {job.run_id}\n")
    return WarmupResult(status="warmed", reason=f"one compiled step filled the cache ({entries} compiled entries)",
                        seconds=result.wall_s, cache_dir=str(cache))
