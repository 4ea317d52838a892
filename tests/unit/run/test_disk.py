"""titanflow.run.disk: the bytes a run writes, and the run refused before launch when its runs folder cannot hold
them."""

from __future__ import annotations

import shutil

import pytest

from titan_cfg.model_spec import config_shape
from titanflow.params import ScenarioRun
from titanflow.run import disk
from titanflow.run.preflight import preflight
from titanflow.weights.fit import trained_config

#: The embedded tiny dense model: a tied 151,936 x 64 embedding and 2 small layers (counted from its config.json,
#: held to transformers' count by tests/unit/titan_cfg/test_model_spec.py).
TINY_DENSE = 9_847_232


def _shape(run: ScenarioRun):
    return config_shape(trained_config(run), None)


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
    the fix; no run folder made (the runs folder itself is made by the check that it is writable)."""
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
    assert "--runs-dir on a larger disk" in message and list((tmp_path / "runs").iterdir()) == []  # no run folder
    assert preflight(run, launch=False).parent == tmp_path / "runs"  # a render writes no checkpoints: not held to it
    # with room for it, the same run passes
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 0, 2**40))
    assert preflight(run).parent == tmp_path / "runs"
