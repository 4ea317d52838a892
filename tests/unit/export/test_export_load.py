"""export assembles a complete HF folder atomically; validate loads it in transformers and
checks keys, tie and a forward pass. Inputs are the tiny weights laid out the way
torchtitan's last_save_in_hf writes them (checkpoint/step-N/ with shards, index, sharded/)."""

import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from titan_cfg.job import Job
from titan_cfg.model_spec import qwen3_shape
from titan_cfg.scenarios import trained_rope_theta
from titanflow.export.assemble import ExportError, assemble_export
from titanflow.export.load import check_export

SHARD = "model-00001-of-00001.safetensors"


def _job(tmp_path: Path, weights_dir: Path, steps: int = 3) -> Job:
    return Job(run_id="r", scenario="native", target="cpu", init="random", weights_dir=str(weights_dir),
               shape=qwen3_shape(weights_dir), world_size=2, dataset_path="unused", dump_folder=str(tmp_path / "run" / "train"), steps=steps,
               global_batch_size=4, local_batch_size=2, seq_len=256, lr=1e-3, warmup_steps=1, seed=0,
               export_dtype="float32", compile=False, kernels={"rope": "reference", "attention": "sdpa"}, spmd_backend=None,
               compile_backend=None, activation_checkpoint="none", mixed_precision_param="float32")


def _torchtitan_save(job: Job, weights_dir: Path) -> Path:
    step_dir = job.export_step_dir
    (step_dir / "sharded").mkdir(parents=True)
    shutil.copy(weights_dir / "model.safetensors", step_dir / SHARD)
    with safe_open(step_dir / SHARD, "pt") as f:
        weight_map = {key: SHARD for key in f.keys()}
    (step_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return step_dir


def test_export_is_a_complete_hf_folder(tmp_path, tiny_assets):
    job = _job(tmp_path, tiny_assets.weights_dir)
    _torchtitan_save(job, tiny_assets.weights_dir)
    export_dir = assemble_export(job, tmp_path / "run")
    names = sorted(p.name for p in export_dir.iterdir())
    assert names == sorted(["config.json", "generation_config.json", SHARD, "model.safetensors.index.json",
                            "tokenizer.json", "tokenizer_config.json"])
    assert json.loads((export_dir / "config.json").read_text())["dtype"] == "float32"
    assert not (tmp_path / "run" / "export.partial").exists()


def test_export_without_index_is_refused_and_nothing_is_published(tmp_path, tiny_assets):
    job = _job(tmp_path, tiny_assets.weights_dir)
    _torchtitan_save(job, tiny_assets.weights_dir)
    (job.export_step_dir / "model.safetensors.index.json").unlink()
    with pytest.raises(ExportError, match="model.safetensors.index.json"):
        assemble_export(job, tmp_path / "run")
    assert not (tmp_path / "run" / "export").exists()


def test_export_with_a_missing_shard_names_it(tmp_path, tiny_assets):
    job = _job(tmp_path, tiny_assets.weights_dir)
    _torchtitan_save(job, tiny_assets.weights_dir)
    (job.export_step_dir / SHARD).unlink()
    with pytest.raises(ExportError, match=SHARD):
        assemble_export(job, tmp_path / "run")


def test_tied_export_misses_only_lm_head_and_ties_it(tiny_assets):
    report = check_export(tiny_assets.weights_dir)
    assert report.missing_in_files == ["lm_head.weight"]
    assert report.missing == [] and report.unexpected == [] and report.mismatched == []
    assert report.tied and report.lm_head_is_embedding and report.forward_finite
    assert report.problems == []


def test_untied_config_without_lm_head_is_a_failure_not_a_random_head(tmp_path, tiny_assets):
    folder = tmp_path / "untied"
    shutil.copytree(tiny_assets.weights_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    report = check_export(folder)
    assert report.problems
    assert report.missing == ["lm_head.weight"]
    assert any("lm_head.weight" in problem for problem in report.problems)


def test_unexpected_tensor_is_reported(tmp_path, tiny_assets):
    folder = tmp_path / "extra"
    shutil.copytree(tiny_assets.weights_dir, folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.mlp.extra.weight"] = tensors["model.norm.weight"].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    report = check_export(folder)
    assert report.unexpected == ["model.layers.0.mlp.extra.weight"] and report.problems


def test_validate_loads_the_export_in_transformers_once_for_the_load_checks_and_parity(tmp_path, tiny_assets,
                                                                                        monkeypatch):
    """The four levels on a clean export of the tiny model, whose probe logits are its own: no problem, KL 0;
    ``AutoModelForCausalLM.from_pretrained`` called once (the load checks and parity share the model), no
    tokenizer loaded (both forwards run on the probe file's ids)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from titan_cfg.probe import PROBE_FILE, probe_ids
    from titanflow.export.validate import validate_export
    from titanflow.params import Tolerances

    job = _job(tmp_path, tiny_assets.weights_dir)
    _torchtitan_save(job, tiny_assets.weights_dir)
    export_dir = assemble_export(job, tmp_path / "run")
    ids = probe_ids(tiny_assets.weights_dir)
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(tiny_assets.weights_dir, dtype=torch.float32)(ids).logits
    torch.save({"input_ids": ids, "logits": logits}, Path(job.dump_folder) / PROBE_FILE)
    loads = []
    upstream = AutoModelForCausalLM.from_pretrained

    def counted(*args, **kwargs):
        loads.append(args[0])
        return upstream(*args, **kwargs)

    def no_tokenizer(*args, **kwargs):
        raise AssertionError("validate loaded a tokenizer")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", counted)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", no_tokenizer)
    report = validate_export(export_dir, job, Tolerances())
    assert loads == [export_dir]
    assert report.problems == [] and report.parity.kl == 0.0 and report.parity.tokens == ids.shape[1]
    assert list(report.seconds) == ["structure", "round_trip", "load", "parity"]


def test_the_export_says_the_rope_base_the_model_trained_with(tmp_path, tiny_assets):
    """The walkthrough's native spec is the 4B flavor, RoPE base 1e6 whatever config.json says (Instruct-2507: 5e6);
    its export's config.json says 1e6, in transformers 5.x's rope_parameters, so transformers runs the model trained.
    A run of the default mode exports the checkpoint's own base."""
    weights = tmp_path / "weights"
    shutil.copytree(tiny_assets.weights_dir, weights)
    config = json.loads((weights / "config.json").read_text())
    config["rope_parameters"]["rope_theta"] = 5e6
    (weights / "config.json").write_text(json.dumps(config))
    for mode, theta in (("config", 5e6), ("walkthrough", 1e6)):
        job = _job(tmp_path / mode, weights).model_copy(update={"model_spec": mode})
        assert trained_rope_theta(job) == theta
        _torchtitan_save(job, weights)
        exported = json.loads((assemble_export(job, tmp_path / mode / "run") / "config.json").read_text())
        assert exported["rope_parameters"]["rope_theta"] == theta and "rope_theta" not in exported
