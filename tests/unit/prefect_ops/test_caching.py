"""Task caching (issue 11): the keys change with what decides a task's output, and a stored result whose files
were deleted is computed again, never trusted (titanflow.prefect_ops.caching)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from titanflow.prefect_ops import caching


def _task_ctx(store=None, source="def task(): ..."):
    """What Keyed.compute_key reads of Prefect's TaskRunContext: the task's source and its result store."""
    return SimpleNamespace(task=SimpleNamespace(source_code=source), result_store=store)


def _weights(folder: Path) -> Path:
    """A weights folder as a local --weights: config.json, a tokenizer, one shard."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "tokenizer.json").write_text('{"model": {}}')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def _pull_key(folder: Path, store=None) -> str | None:
    inputs = {"weights": str(folder), "init": "random", "model_type": "qwen3"}
    return caching.PULL_WEIGHTS.compute_key(_task_ctx(store), inputs, {})


def test_a_changed_file_of_the_weights_folder_changes_the_key(tmp_path):
    folder = _weights(tmp_path / "w")
    key = _pull_key(folder)
    assert key == _pull_key(folder)  # nothing changed: the same key
    (folder / "config.json").write_text('{"model_type": "qwen3", "hidden_size": 64}')
    edited = _pull_key(folder)
    assert edited != key
    # a shard is keyed by size and mtime, not read: rewriting it with other bytes of the same size moves mtime
    stat = (folder / "model.safetensors").stat()
    (folder / "model.safetensors").write_bytes(b"\1" * 64)
    os.utime(folder / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert _pull_key(folder) not in (key, edited)


def test_a_changed_package_version_or_task_source_changes_the_key(tmp_path, monkeypatch):
    inputs = {"model_type": "qwen3"}
    key = caching.BUILD_TINY_WEIGHTS.compute_key(_task_ctx(), inputs, {})
    assert caching.BUILD_TINY_WEIGHTS.compute_key(_task_ctx(source="def task(): return 1"), inputs, {}) != key
    real = caching.importlib.metadata.version
    monkeypatch.setattr(caching.importlib.metadata, "version",
                        lambda name: "9.9.9" if name == "transformers" else real(name))
    assert caching.versions("transformers") == {"transformers": "9.9.9"}
    assert caching.BUILD_TINY_WEIGHTS.compute_key(_task_ctx(), inputs, {}) != key


def test_a_hub_id_to_download_is_not_cached_but_its_copy_under_the_weights_root_is(tmp_path, monkeypatch):
    monkeypatch.delenv("TITANFLOW_WEIGHTS_ROOT", raising=False)
    inputs = {"weights": "Qwen/Qwen3-4B-Instruct-2507", "init": "pretrained", "model_type": "qwen3"}
    assert caching.PULL_WEIGHTS.compute_key(_task_ctx(), inputs, {}) is None  # huggingface_hub's cache decides
    _weights(tmp_path / "Qwen" / "Qwen3-4B-Instruct-2507")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(tmp_path))
    assert caching.PULL_WEIGHTS.compute_key(_task_ctx(), inputs, {}) is not None


def test_the_torchtitan_config_key_is_the_same_for_every_run_id(tmp_path, tiny_assets):
    """The config is built for the job without its run: two runs of one job share it, another seed does not."""
    from titan_cfg.job import JOB_ENV
    from titanflow.launch.render import make_job, without_run
    from titanflow.params import ScenarioRun

    def key(run_id: str, seed: int = 0) -> str:
        job = make_job(ScenarioRun(seed=seed), tiny_assets.weights_dir, tmp_path / run_id)
        env = {JOB_ENV: str(tmp_path / run_id / "job" / "job.json"), "OMP_NUM_THREADS": "1"}
        return caching.TORCHTITAN_CONFIG.compute_key(_task_ctx(), {"job": without_run(job), "env": env}, {})

    assert key("run-a") == key("run-b")
    assert key("run-a", seed=1) != key("run-a")


def test_a_stored_result_whose_files_were_deleted_is_skipped_and_the_next_key_is_used(tmp_path):
    """Keyed reads the stored result back (the tiny weights' build: its key does not look at the folder): while
    the folder is whole the key stands; with a shard deleted the key moves on (the task runs again and stores
    there); once the files are back the first key stands again."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    store = ResultStore(result_storage=LocalFileSystem(basepath=str(tmp_path / "results")))
    ctx, inputs = _task_ctx(store), {"model_type": "qwen3"}
    tiny = _weights(tmp_path / "tiny")
    built = caching.BUILD_TINY_WEIGHTS.compute_key(ctx, inputs, {})
    store.write(obj=str(tiny), key=built)
    assert caching.BUILD_TINY_WEIGHTS.compute_key(ctx, inputs, {}) == built  # stored, files there: a hit
    (tiny / "model.safetensors").unlink()
    again = caching.BUILD_TINY_WEIGHTS.compute_key(ctx, inputs, {})
    assert again not in (built, None)  # not the stored result's key: the task runs
    (tiny / "model.safetensors").write_bytes(b"\0" * 64)  # what the run that follows writes
    store.write(obj=str(tiny), key=again)
    assert caching.BUILD_TINY_WEIGHTS.compute_key(ctx, inputs, {}) == built
    shutil.rmtree(tiny)  # both stored results' files gone: a third key
    assert caching.BUILD_TINY_WEIGHTS.compute_key(ctx, inputs, {}) not in (built, again, None)


def test_weights_intact_needs_config_and_every_indexed_shard(tmp_path):
    folder = _weights(tmp_path / "w")
    assert caching.weights_intact(folder)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-00001-of-00002.safetensors"}}')
    assert not caching.weights_intact(folder)
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"\0")
    assert caching.weights_intact(folder)
    (folder / "config.json").unlink()
    assert not caching.weights_intact(folder)


def test_a_training_is_cached_for_its_own_run_folder_while_its_final_save_and_metrics_are_there(tmp_path, tiny_assets):
    """train's key names the run folder and its job files: a retry or resume of the run finds it, another run of the
    same job (another folder) does not; the stored TrainResult holds while metrics.csv and every shard the final
    step's index names are there."""
    from titanflow.launch.render import RenderedJob, make_job
    from titanflow.params import ScenarioRun
    from titanflow.results import TrainResult

    def rendered(run_id: str) -> RenderedJob:
        run_dir = tmp_path / run_id
        (run_dir / "job").mkdir(parents=True)
        job = make_job(ScenarioRun(steps=3), tiny_assets.weights_dir, run_dir)
        job.write(run_dir / "job" / "job.json")
        (run_dir / "job" / "trainer_config.json").write_text("{}")
        return RenderedJob(run_dir=str(run_dir), job_path=str(run_dir / "job" / "job.json"), env={}, argv=[],
                           trainer_config_path=str(run_dir / "job" / "trainer_config.json"))

    def key(job: RenderedJob, timeout_s: float = 600) -> str:
        return caching.TRAIN.compute_key(_task_ctx(), {"rendered": job, "timeout_s": timeout_s}, {})

    a, b = rendered("run-a"), rendered("run-b")
    assert key(a) == key(a, timeout_s=60) != key(b)  # a resume may change the timeout; another run never hits
    step_dir = tmp_path / "run-a" / "train" / "checkpoint" / "step-3"
    step_dir.mkdir(parents=True)
    (step_dir / "model.safetensors.index.json").write_text('{"weight_map": {"w": "model-00001-of-00001.safetensors"}}')
    (step_dir / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    (tmp_path / "run-a" / "metrics.csv").write_text("step,loss\n")
    result = TrainResult(log_path=str(tmp_path / "run-a" / "train.log"), metrics_path=str(tmp_path / "run-a" / "metrics.csv"),
                         losses=[12.0, 11.9, 11.8], tokens_per_s=1.0, peak_memory_gib=1.0, peak_rss_bytes=1, wall_s=1.0)
    assert caching.TRAIN.intact(result)
    (step_dir / "model-00001-of-00001.safetensors").unlink()  # the final save gone: train again
    assert not caching.TRAIN.intact(result)


@pytest.fixture(scope="module")
def prefect_server():
    """A temporary Prefect server for this module, its results stored under a temporary folder."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def test_a_cached_task_ends_cached_and_runs_again_once_its_output_is_deleted(prefect_server, tmp_path):
    """A real task with a Keyed policy in a real flow: the second identical call ends Cached without running;
    after its output folder is deleted the third runs (Completed) and writes it again."""
    from prefect import flow, task

    runs = []

    @task(cache_policy=caching.Keyed(intact=caching.weights_intact), persist_result=True)
    def build(folder: str) -> str:
        runs.append(folder)
        shutil.rmtree(folder, ignore_errors=True)
        return str(_weights(Path(folder)))

    @flow
    def twice(folder: str) -> list[str]:
        return [build(folder, return_state=True).name for _ in range(2)]

    folder = str(tmp_path / "built")
    assert twice(folder) == ["Completed", "Cached"] and len(runs) == 1
    assert twice(folder) == ["Cached", "Cached"] and len(runs) == 1  # a new flow run: still the stored result
    shutil.rmtree(folder)
    assert twice(folder) == ["Completed", "Cached"] and len(runs) == 2
    assert caching.weights_intact(folder)
