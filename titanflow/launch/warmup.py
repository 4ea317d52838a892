"""Compile warm-up: fill the compile cache before the measured run.

With compile on, the first training step would otherwise include graph
compilation (minutes on Neuron). The warm-up runs the same job for one step
into ``runs/<id>/warmup/``, sharing the content-keyed cache folder that
training then reads (titan_cfg.compile_cache). The folder is warm when an
earlier warm-up completed there (the ``.warm`` marker, which names its run) and
the compiler's own entries are there (titan_cfg.compile_cache.cache_entries):
a marker alone means the compiler did not write where the job's variables
point, and the step is compiled again. A warm-up after which the compiler wrote
nothing there leaves no marker and says so.

With compile off, a job still compiles when its model masks documents with flex attention: torchtitan's own models
build the mask with ``torch.compile(create_block_mask)`` (torchtitan.models.common.attention.create_attention_mask)
on the first step, with inductor, into the same keyed folder (``TORCHINDUCTOR_CACHE_DIR``). The warm-up runs that
step ahead (:func:`compiles_when_eager`), so a cold run's first training step costs what a warm run's does and the
report shows the compile apart from training. The dense ``sdpa`` attention (every target but cuda) builds the mask
eagerly (titan_cfg.kernels.attention.eager_block_mask): nothing is compiled ahead, and the task records why it
skipped.
"""

from __future__ import annotations

from pathlib import Path

from titan_cfg.compile_cache import CACHE_ENV, cache_entries, cache_folder
from titan_cfg.job import JOB_ENV, Job
from titan_cfg.scenarios import SCENARIOS
from titanflow.launch.render import RenderedJob
from titanflow.launch.torchrun import launch, launch_error, ranks_dir
from titanflow.results import WarmupResult

#: Marker of a completed warm-up of a compiled job (its first step compiled, the block-mask builder included).
WARM_MARKER = ".warm"
#: Marker of a completed warm-up of an eager job: the block-mask builder only (the folder is shared with the
#: compiled job of the same key, whose model it does not warm).
EAGER_WARM_MARKER = ".warm-eager"


def is_warm(folder: Path, backend: str, eager: bool = False) -> bool:
    """An earlier warm-up completed in ``folder`` (its marker: a compiled job's, or for an ``eager`` job either)
    and the ``backend``'s compiler has entries there."""
    markers = (WARM_MARKER, EAGER_WARM_MARKER) if eager else (WARM_MARKER,)
    return any((folder / m).is_file() for m in markers) and \
        cache_entries(folder, backend, ignore=(WARM_MARKER, EAGER_WARM_MARKER)) > 0


def compiles_when_eager(job: Job, backend: str | None) -> bool:
    """With compile off, the job's first step still compiles: its model masks documents (the scenario's
    ``document_mask``) with torchtitan's compiled block-mask builder, which flex attention alone keeps (the dense
    ``sdpa`` attention builds it eagerly: titan_cfg.kernels.attention), and the keyed folder is inductor's
    (``backend``), where that compile goes (a Neuron target's folder is the Neuron compiler's: the builder's
    inductor artifacts would not be kept there)."""
    return SCENARIOS[job.scenario].document_mask and job.kernels.get("attention") == "flex" and backend == "inductor"


def warm_up(rendered: RenderedJob, timeout_s: float, on_lines=lambda _: None) -> WarmupResult:
    """Run one step unless the job compiles nothing (compile off and :func:`compiles_when_eager` false) or the
    cache is already warm; ``timeout_s`` bounds the one-step launch (seconds).

    Raises:
        titanflow.launch.torchrun.TrainingError: the warm-up run failed (compile failures surface here, before
            training).
    """
    found = cache_folder(rendered.env)
    cache, backend = found if found else (None, None)
    job = Job.read(Path(rendered.job_path))
    eager = not job.compile
    if eager and not compiles_when_eager(job, backend):
        builder = "builds its mask eagerly" if job.kernels.get("attention") != "flex" else "compiles no mask builder"
        return WarmupResult(status="skipped", reason=f"compile is off and the model {builder}: nothing to compile "
                            "ahead", seconds=0.0, cache_dir=None, eager=True)
    what = "its block-mask builder" if eager else "its model"
    if rendered.scheduler != "local":  # the warm-up runs here, on one node; the job's nodes compile their own
        return WarmupResult(status="skipped", reason=f"a {rendered.scheduler} job: its nodes compile in the first "
                            "step, into the keyed cache folder they share", seconds=0.0,
                            cache_dir=str(cache) if cache else None)
    if cache is not None and is_warm(cache, backend, eager):
        entries = cache_entries(cache, backend, ignore=(WARM_MARKER, EAGER_WARM_MARKER))
        return WarmupResult(status="reused", reason=f"cache {cache.name} is warm ({entries} compiled entries"
                            f"{', the block-mask builder of an eager job' if eager else ''})",
                            seconds=0.0, cache_dir=str(cache), eager=eager)
    warm_job = job.model_copy(update={"steps": 1, "warmup_steps": 0,
                                      "dump_folder": str(Path(rendered.run_dir) / "warmup")})
    warm_path = warm_job.write(Path(rendered.job_path).with_name("warmup_job.json"))
    result, log_path = launch(rendered, timeout_s=timeout_s, log_name="warmup.log", on_lines=on_lines,
                              extra_env={JOB_ENV: str(warm_path)})
    if result.returncode != 0 or result.timed_out:
        raise launch_error("compile_warmup", f"the one-step compile run (compiling {what}) failed", result, log_path,
                           ranks_dir(rendered))
    if cache is None:
        return WarmupResult(status="warmed", reason=f"one step compiled {what}; the job names no compile cache",
                            seconds=result.wall_s, cache_dir=None, eager=eager)
    entries = cache_entries(cache, backend, ignore=(WARM_MARKER, EAGER_WARM_MARKER))
    if not entries:  # the compiler did not read the variables: training will compile again
        variables = ", ".join(CACHE_ENV[backend])
        return WarmupResult(status="warmed", reason=f"one step compiled {what}, but the compiler wrote nothing under "
                            f"{cache} ({variables} were not read): training compiles again", seconds=result.wall_s,
                            cache_dir=str(cache), eager=eager)
    (cache / (EAGER_WARM_MARKER if eager else WARM_MARKER)).write_text(f"warmed by run {job.run_id}\n")
    return WarmupResult(status="warmed", reason=f"one step compiled {what} into the cache ({entries} compiled "
                        "entries)", seconds=result.wall_s, cache_dir=str(cache), eager=eager)
