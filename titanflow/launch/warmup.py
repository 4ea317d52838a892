"""Compile warm-up: fill the compile cache before the measured run.

With compile on, the first training step would otherwise include graph
compilation (minutes on Neuron). The warm-up runs the same job for one step
into ``runs/<id>/warmup/``, sharing the content-keyed cache folder that
training then reads (titan_cfg.compile_cache). A cache folder holding the
``.warm`` marker from an earlier complete warm-up is reused as is. With compile
off, nothing is compiled ahead of time and the task records why it skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from titan_cfg.compile_cache import CACHE_ENV
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


def cache_dir_of(rendered: RenderedJob) -> Path | None:
    """The compile-cache folder the rendered environment points at (None if none)."""
    folder = next((rendered.env[v] for v in CACHE_ENV.values() if v in rendered.env), None)
    return Path(folder) if folder else None


def warm_up(rendered: RenderedJob, timeout_s: float, on_line=lambda _: None) -> WarmupResult:
    """Run one compiled step unless the job's compile is off or the cache is already warm;
    ``timeout_s`` bounds the one-step launch (seconds).

    Raises:
        titanflow.launch.torchrun.TrainingError: the warm-up run failed (compile failures surface here, before
            training).
    """
    cache = cache_dir_of(rendered)
    job = Job.read(Path(rendered.job_path))
    if not job.compile:
        return WarmupResult(status="skipped", reason="compile is off: eager mode has nothing to compile ahead",
                            seconds=0.0, cache_dir=None)
    if cache is not None and (cache / WARM_MARKER).exists():
        return WarmupResult(status="reused", reason=f"cache {cache.name} is warm", seconds=0.0, cache_dir=str(cache))
    warm_job = job.model_copy(update={"steps": 1, "warmup_steps": 0,
                                      "dump_folder": str(Path(rendered.run_dir) / "warmup")})
    warm_path = warm_job.write(Path(rendered.job_path).with_name("warmup_job.json"))
    result, log_path = launch(rendered, timeout_s=timeout_s, log_name="warmup.log", on_line=on_line,
                              extra_env={JOB_ENV: str(warm_path)})
    if result.returncode != 0 or result.timed_out:
        raise launch_error("compile_warmup", "the one-step compile run failed", result, log_path, ranks_dir(rendered))
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / WARM_MARKER).write_text(f"warmed by run {job.run_id}\n")
    return WarmupResult(status="warmed", reason="one compiled step filled the cache", seconds=result.wall_s,
                        cache_dir=str(cache) if cache else None)
