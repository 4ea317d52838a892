"""render_config: the job files, and the trn2 target pinned by a golden file.

Regenerate the golden after an intended change with:
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_render.py
"""

import json
import os
from pathlib import Path

import pytest

from tasks.config import render
from titan_cfg.job import JOB_ENV, Job
from titanflow.params import ScenarioRun

GOLDEN = Path(__file__).parent / "golden"


def _rendered_files(job_dir: Path) -> dict:
    return {name: json.loads((job_dir / name).read_text()) for name in ("job.json", "launch.json", "trainer_config.json")}


def test_cpu_job_matches_the_weights_folder(tmp_path, tiny_assets):
    rendered = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    files = _rendered_files(Path(rendered.job_path).parent)
    job, launch, trainer = files["job.json"], files["launch.json"], files["trainer_config.json"]
    assert (job["local_batch_size"], job["global_batch_size"], job["seq_len"], job["steps"]) == (2, 4, 256, 3)
    assert launch["argv"][:3] == ["torchrun", "--standalone", "--nproc_per_node=2"]
    assert launch["env"][JOB_ENV] == rendered.job_path
    assert "TORCHINDUCTOR_CACHE_DIR" in launch["env"]
    model = trainer["model_spec"]["model"]
    config = json.loads((tiny_assets.weights_dir / "config.json").read_text())
    assert (model["dim"], model["vocab_size"], len(model["layers"])) == (
        config["hidden_size"], config["vocab_size"], config["num_hidden_layers"])
    attention = model["layers"][0]["attention"]
    assert attention["inner_attention"]["_class"] == "titan_cfg.attention.MaskedSDPAttention.Config"
    assert trainer["checkpoint"]["last_save_in_hf"] and trainer["checkpoint"]["export_dtype"] == "float32"
    assert trainer["parallelism"]["spmd_backend"] == "partial_dtensor"
    assert Job.read(Path(rendered.job_path)).export_step_dir == tmp_path / "run" / "train" / "checkpoint" / "step-3"


def test_seq_len_beyond_the_model_context_is_refused(tmp_path, tiny_assets):
    with pytest.raises(ValueError, match="seq_len"):
        render(ScenarioRun(seq_len=8192), tiny_assets.weights_dir, tmp_path / "run")


def _normalised(files: dict, replacements: dict[str, str]) -> dict:
    text = json.dumps(files, indent=2, sort_keys=True)
    for real, placeholder in replacements.items():
        text = text.replace(real, placeholder)
    return json.loads(text)


@pytest.mark.parametrize("scenario", ["native", "hf_backend"])
def test_trn2_render_matches_golden(tmp_path, instruct_2507_folder, scenario):
    run_dir = tmp_path / "runs" / f"{scenario}-trn2-golden"
    rendered = render(ScenarioRun(scenario=scenario, target="trn2", run_id=run_dir.name), instruct_2507_folder, run_dir)
    from titanflow import paths

    files = _normalised(_rendered_files(Path(rendered.job_path).parent), {
        str(instruct_2507_folder): "<WEIGHTS>", str(run_dir): "<RUN>",
        str(paths.cache_root()): "<CACHE>", str(paths.REPO_ROOT): "<REPO>",
    })
    golden = GOLDEN / f"{scenario}-trn2.json"
    if os.environ.get("TITANFLOW_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(files, indent=2, sort_keys=True) + "\n")
    assert files == json.loads(golden.read_text())


def test_trn2_render_handles_the_walkthrough_pitfalls(tmp_path, instruct_2507_folder):
    rendered = render(ScenarioRun(target="trn2"), instruct_2507_folder, tmp_path / "run")
    files = _rendered_files(Path(rendered.job_path).parent)
    trainer, launch = files["trainer_config.json"], files["launch.json"]
    assert trainer["model_spec"]["model"]["layers"][0]["attention"]["rope"]["theta"] == 5_000_000  # not 1e6
    assert trainer["hf_assets_path"] == str(instruct_2507_folder)  # not qwen3_32b()'s ./assets/hf/Qwen3-32B
    assert trainer["checkpoint"]["export_dtype"] == "float32"  # not qwen3_32b()'s float16
    assert (trainer["training"]["global_batch_size"], trainer["training"]["local_batch_size"]) == (64, 1)
    assert "--nproc_per_node=64" in launch["argv"]
    assert launch["env"]["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert "NEURON_COMPILE_CACHE_URL" in launch["env"]
    assert "0x" not in json.dumps(trainer)  # no memory addresses: renders compare equal


def test_pretrained_job_loads_the_folder_from_hf_model_only(tmp_path, tiny_assets):
    rendered = render(ScenarioRun(init="pretrained", weights=str(tiny_assets.weights_dir)), tiny_assets.weights_dir,
                      tmp_path / "run")
    checkpoint = _rendered_files(Path(rendered.job_path).parent)["trainer_config.json"]["checkpoint"]
    assert checkpoint["enable"] and checkpoint["initial_load_in_hf"] and checkpoint["initial_load_model_only"]
    assert checkpoint["initial_load_path"] == str(tiny_assets.weights_dir)
