"""Scenario 1's tied check, as the walkthrough makes it, reported beside today's untied export: the tiny tied
Qwen3 saved the way torchtitan's transformers backend saves it (the embedding, no lm_head) with the trained
head the run untied added by the export (titanflow.export.assemble)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from titan_cfg.job import Job
from titan_cfg.model_spec import qwen3_shape
from titan_cfg.probe import UNTIED_HEAD_FILE
from titanflow.export.assemble import assemble_export
from titanflow.export.load import check_export, check_tied_as_saved

SHARD = "model-00001-of-00001.safetensors"


def _untied_export(tmp_path: Path, weights_dir: Path, drop: str | None = None) -> Path:
    """The export of an hf_backend run of the tied tiny model: torchtitan's save holds no lm_head; the run
    untied the head and trained it (the embedding plus 0.01), which the export adds as its own shard."""
    job = Job(run_id="r", scenario="hf_backend", target="cpu", init="pretrained", weights_dir=str(weights_dir),
              shape=qwen3_shape(weights_dir), world_size=1, dataset_path="unused",
              dump_folder=str(tmp_path / "run" / "train"), steps=3, global_batch_size=4, local_batch_size=4,
              seq_len=256, lr=1e-3, warmup_steps=1, seed=0, export_dtype="float32", compile=False,
              kernels={"rope": "reference", "attention": "sdpa"}, spmd_backend="spmd_types", compile_backend=None,
              activation_checkpoint="none", mixed_precision_param="float32")
    step_dir = job.export_step_dir
    step_dir.mkdir(parents=True)
    tensors = load_file(weights_dir / "model.safetensors")
    assert "lm_head.weight" not in tensors  # a tied checkpoint's files carry the embedding only
    if drop:
        del tensors[drop]
    save_file(tensors, step_dir / SHARD, metadata={"format": "pt"})
    (step_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {key: SHARD for key in tensors}}))
    head = tensors["model.embed_tokens.weight"] + 0.01
    save_file({"lm_head.weight": head}, Path(job.dump_folder) / UNTIED_HEAD_FILE)
    return assemble_export(job, tmp_path / "run")


def test_the_untied_export_and_the_walkthroughs_tied_check_are_two_results(tmp_path, tiny_assets):
    export_dir = _untied_export(tmp_path, tiny_assets.weights_dir)
    untied = check_export(export_dir)
    assert not untied.tied and untied.missing_in_files == [] and untied.problems == []
    walkthrough = check_tied_as_saved(export_dir)
    assert walkthrough.tied and walkthrough.missing_in_files == ["lm_head.weight"]  # the walkthrough's check
    assert walkthrough.missing == [] and walkthrough.unexpected == [] and walkthrough.mismatched == []
    assert walkthrough.lm_head_is_embedding and walkthrough.forward_finite and walkthrough.problems == []
    assert [p.name for p in export_dir.parent.iterdir() if p.name.startswith(".tied-as-saved-")] == []
    with safe_open(export_dir / "model-lm_head.safetensors", "pt") as f:  # the export itself is untouched
        assert torch.equal(f.get_tensor("lm_head.weight"), load_file(
            export_dir / SHARD)["model.embed_tokens.weight"] + 0.01)


def test_a_save_missing_more_than_the_tied_head_fails_the_walkthroughs_check(tmp_path, tiny_assets):
    export_dir = _untied_export(tmp_path, tiny_assets.weights_dir, drop="model.norm.weight")
    report = check_tied_as_saved(export_dir)
    assert report.missing_in_files == ["lm_head.weight", "model.norm.weight"]
    assert any("model.norm.weight" in p for p in report.problems)


def test_an_export_without_an_untied_head_shard_has_nothing_to_leave_out(tmp_path, tiny_assets):
    folder = tmp_path / "tied"
    shutil.copytree(tiny_assets.weights_dir, folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model.safetensors"}}))
    with pytest.raises(ValueError, match="no shard holding lm_head.weight alone"):
        check_tied_as_saved(folder)


def test_summaries_written_before_the_tied_check_still_read():
    from helpers import FIXTURES

    from titanflow.record.summary import read_summary

    summary = read_summary(FIXTURES / "run_folders" / "native-cpu-random" / "summary.json")
    assert summary.validation.walkthrough_tie is None and summary.validation.load.tied
