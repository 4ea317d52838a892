"""titanflow.run.disk: the bytes a run writes, and the run refused before launch when its runs folder cannot hold
them."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from titan_cfg.model_spec import config_shape
from titanflow.params import ScenarioRun
from titanflow.run import disk
from titanflow.run.model_config import trained_config
from titanflow.run.preflight import preflight

#: The embedded tiny dense model: a tied 151,936 x 64 embedding and 2 small layers (counted from its config.json,
#: held to transformers' count by tests/unit/titan_cfg/test_model_spec.py).
TINY_DENSE = 9_847_232


def _shape(run: ScenarioRun):
    return config_shape(trained_config(run), None)


def _moe_shape(config: dict):
    return config_shape(config, "qwen3_moe")


def test_the_default_cpu_runs_write_what_their_checkpoints_export_and_logs_need():
    native, backend = ScenarioRun(scenario="native"), ScenarioRun(scenario="hf_backend")
    assert _shape(native).parameters == TINY_DENSE
    assert disk.trained_parameters(native, _shape(native)) == TINY_DENSE
    # the transformers backend unties the tied lm_head: one 151,936 x 64 matrix more to checkpoint and export
    assert disk.trained_parameters(backend, _shape(backend)) == TINY_DENSE + 151_936 * 64
    # 10 steps, a full-state save every 5: 2 kept (of keep_latest_k + 1 = 3 at most), 12 bytes a parameter each
    assert native.checkpoint_interval_resolved == 5
    assert disk.run_bytes(native, TINY_DENSE) == disk.RunBytes(2 * 12 * TINY_DENSE, 2 * 4 * TINY_DENSE, 128 * 2**20)
    # a save every step of 10: the newest 2 kept and a third being written
    every_step = ScenarioRun(scenario="native", checkpoint_interval=1)
    assert disk.run_bytes(every_step, TINY_DENSE).checkpoints == 3 * 12 * TINY_DENSE
    assert disk.run_bytes(ScenarioRun(export_dtype="bfloat16"), TINY_DENSE).export == 2 * 2 * TINY_DENSE


def test_a_runs_folder_too_small_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """200 MiB free, against the 0.42 GiB the default native run writes: refused naming the folder, both figures and
    the fix; nothing made (the check that the runs folder is writable removes the folder it made to try)."""
    free = 200 * 2**20
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**30, 2**30 - free, free))
    run = ScenarioRun(scenario="native", target="cpu", runs_dir=str(tmp_path / "runs"))
    with pytest.raises(ValueError) as refused:
        preflight(run)
    message = str(refused.value)
    needed = disk.run_bytes(run, TINY_DENSE)
    assert message.startswith(f"runs_dir: {tmp_path / 'runs'} has 0.20 GiB free and the run writes up to "
                              f"{needed.total / 2**30:.2f} GiB (step checkpoints 0.22 GiB, export 0.07 GiB, logs and "
                              f"the rest 0.12 GiB) for 9,847,232 parameters; fix: ")
    assert "--runs-dir on a larger disk" in message and not (tmp_path / "runs").exists()  # nothing made
    assert preflight(run, launch=False).parent == tmp_path / "runs"  # a render writes no checkpoints: not held to it
    # with room for it, the same run passes
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 0, 2**40))
    assert preflight(run).parent == tmp_path / "runs"


def test_the_refusal_names_the_prune_that_would_make_room(tmp_path, monkeypatch):
    """A runs folder whose sixth-newest passing run of one workload still holds a 1.5 GiB export (sparse): the
    retention policy (the newest 5 passing runs kept whole) would free it, and the refusal says so with the command."""
    from helpers.run_folders import CHECKPOINT_BYTES, make_run

    runs = tmp_path / "runs"
    for day in range(6):
        make_run(runs, f"pass-{day}", "pass", days_ago=day, export_bytes=3 * 2**29 if day == 5 else 0)
    free = 200 * 2**20
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**30, 2**30 - free, free))
    run = ScenarioRun(scenario="native", target="cpu", runs_dir=str(runs))
    with pytest.raises(ValueError) as refused:
        preflight(run)
    freed = (3 * 2**29 + CHECKPOINT_BYTES) / 2**30
    assert str(refused.value).endswith(f"; or titanflow prune --apply --runs-dir {runs}, which frees {freed:.2f} GiB "
                                       "there under the retention policy (titanflow/record/retention.toml)")


def qwen3_moe_parameters(config: dict) -> int:
    """Parameters of an untied Qwen3 MoE checkpoint by hand from its config.json: the embedding and lm_head, per layer
    q/k/v/o, q/k norms, the router, every expert's gated MLP and two norms, and the final norm (transformers'
    Qwen3-MoE modelling, written out)."""
    hidden, heads, kv, head_dim = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                       "head_dim"))
    experts = config["num_experts"]
    layer = (2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim + 2 * head_dim
             + hidden * experts + experts * 3 * hidden * config["moe_intermediate_size"] + 2 * hidden)
    return 2 * config["vocab_size"] * hidden + config["num_hidden_layers"] * layer + hidden


def test_a_trim_of_pretrained_weights_writes_its_checkpoint_into_the_cache_once(tmp_path, monkeypatch):
    """Qwen3-30B-A3B's published config.json trimmed to the walkthrough's 4 layers, 64 experts, top-4: 1,906,330,624
    parameters (by hand) in bfloat16 (its torch_dtype), 3.55 GiB into the cache; nothing once the cache holds a trim
    of the same sizes (titanflow.weights.trim.cached_trim)."""
    from helpers import FIXTURES

    from titan_cfg.model_spec import read_config
    from titanflow.params import Trim
    from titanflow.weights.trim import trimmed_config

    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "qwen3-30b-a3b"
    shutil.copytree(FIXTURES / "qwen3-30b-a3b", source)
    trim = Trim(layers=4, experts=64, top_k=4)
    config = trimmed_config(read_config(source), trim, source="", source_id=None)
    parameters = qwen3_moe_parameters(config)
    assert parameters == 1_906_330_624 and _moe_shape(config).parameters == parameters
    run = ScenarioRun(scenario="moe", target="trn2", init="pretrained", weights=str(source), trim=trim,
                      runs_dir=str(tmp_path / "runs"))
    (write,) = disk.cache_writes(run, config)
    assert (write.folder, write.size) == (tmp_path / "cache" / "trimmed", 2 * parameters)
    cache = tmp_path / "cache"
    assert write.what == f"the run writes the trimmed checkpoint, 3.55 GiB (bfloat16), into the cache {cache}"
    # random init trims config.json alone: nothing sized
    assert disk.cache_writes(run.model_copy(update={"init": "random"}), config) == []
    # a trim made before (titanflow.weights.trim.trim_moe writes config.json with the trim record)
    made = tmp_path / "cache" / "trimmed" / "Qwen--Qwen3-30B-A3B-0123456789ab"
    made.mkdir(parents=True)
    (made / "config.json").write_text(json.dumps(trimmed_config(read_config(source), trim, "Qwen/Qwen3-30B-A3B",
                                                                "Qwen/Qwen3-30B-A3B")))
    assert disk.cache_writes(run, config) == []
    other = trimmed_config(read_config(source), Trim(layers=2, experts=64, top_k=4), source="", source_id=None)
    assert [w.size for w in disk.cache_writes(run.model_copy(update={"trim": Trim(layers=2, experts=64, top_k=4)}),
                                              other)] == [2 * qwen3_moe_parameters(other)]


def test_the_pretrained_tiny_checkpoints_build_counts_until_it_is_in_the_cache(tmp_path, monkeypatch):
    """A pretrained-init run on the embedded weights builds the tiny checkpoint first (titanflow.run.pretrained): its
    pretraining run's writes (1 rank, its recipe's steps and checkpoints) and the float32 copy, on the runs folder's
    file system summed with the run's own; refused with both named when they do not fit together."""
    from titanflow.run.pretrained import RECIPES

    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    run = ScenarioRun(scenario="native", target="cpu", init="pretrained", runs_dir=str(tmp_path / "runs"))
    config = trained_config(run)
    scenario, recipe = RECIPES["qwen3"]
    pretraining = disk.run_bytes(ScenarioRun(scenario=scenario, target="cpu", nproc_per_node=1, **recipe), TINY_DENSE)
    (write,) = disk.cache_writes(run, config)
    assert write.size == pretraining.total + 4 * TINY_DENSE
    own = disk.run_bytes(run, TINY_DENSE).total
    (need,) = disk.space_needs([disk.Write(tmp_path / "runs", own, "the run's"), write])  # one file system: summed
    assert need.needed == own + write.size and need.what.endswith(f": {need.needed / 2**30:.2f} GiB in all")
    free = own + write.size // 2  # room for the run, not for the build too
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**40 - free, free))
    with pytest.raises(ValueError, match=r"^runs_dir: .* and the run builds the pretrained tiny checkpoint, 0.57 GiB, "
                                         r"into the cache .*: 0.98 GiB in all; fix: free space there, pass --runs-dir "
                                         r".*; "
                                         r"or free space there, or export TITANFLOW_CACHE="):
        preflight(run)
    built = tmp_path / "cache" / "assets" / "tiny-qwen3-pretrained-0123456789ab"
    built.mkdir(parents=True)
    (built / "config.json").write_text(json.dumps(config))
    assert disk.cache_writes(run, config) == []
    assert disk.cache_writes(ScenarioRun(scenario="moe", target="cpu", init="pretrained"), trained_config(
        ScenarioRun(scenario="moe", target="cpu", init="pretrained")))  # the MoE's is another checkpoint


def test_the_cache_alone_full_names_titanflow_cache(tmp_path, monkeypatch):
    """The cache on a file system of its own (/dev/shm, a tmpfs) without room for the build: refused naming
    TITANFLOW_CACHE and the fix, while the runs folder's has room."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as cache:
        assert os.stat(cache).st_dev != os.stat(tmp_path).st_dev
        monkeypatch.setenv("TITANFLOW_CACHE", cache)
        monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(
            2**40, 0, 2**20 if str(path).startswith(cache) else 2**40))
        run = ScenarioRun(scenario="native", target="cpu", init="pretrained", runs_dir=str(tmp_path / "runs"))
        with pytest.raises(ValueError) as refused:
            preflight(run)
    assert str(refused.value).startswith(f"TITANFLOW_CACHE: {cache} has 0.00 GiB free and the run builds the "
                                         f"pretrained tiny checkpoint, 0.57 GiB, into the cache {cache}; fix: ")
    assert str(refused.value).endswith("fix: free space there, or export TITANFLOW_CACHE=<a folder on a larger disk>")
