"""render_config: the job files, and the trn2 target pinned by a golden file.

Regenerate the golden after an intended change with:
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/launch/test_render.py
"""

import json
import os
from pathlib import Path

import pytest

from titanflow.judge.goldens import RENDER_DIR
from titanflow.launch.render import render
from titan_cfg.job import JOB_ENV, Job
from titanflow.run.params import ScenarioRun

GOLDEN = RENDER_DIR


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
    assert attention["inner_attention"]["_class"] == "titan_cfg.kernels.attention.KernelAttention.Config"
    assert attention["rope"]["_class"].startswith("torchtitan.")  # rope=reference: torchtitan's module untouched
    assert job["kernels"] == {"rope": "reference", "attention": "sdpa"}
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


def test_moe_cpu_job_swaps_rope_and_keeps_routing_exportable(tmp_path):
    """The tiny MoE: every layer routed (8 experts, top-2, renormalised), expert FFN 48 != hidden 64,
    untied head, the cpu rope custom op in every layer, no expert-bias load balancing (transformers'
    Qwen3MoeForCausalLM could not carry the bias; titan_cfg.model_spec._layers)."""
    from titanflow.assets import TINY_MOE, ensure_assets

    weights = ensure_assets(spec=TINY_MOE).weights_dir
    rendered = render(ScenarioRun(scenario="moe", steps=3), weights, tmp_path / "run")
    files = _rendered_files(Path(rendered.job_path).parent)
    model = files["trainer_config.json"]["model_spec"]["model"]
    assert files["job.json"]["kernels"] == {"rope": "cpu", "attention": "sdpa"}
    assert len(model["layers"]) == TINY_MOE.num_hidden_layers and not model["enable_weight_tying"]
    for layer in model["layers"]:
        assert layer["attention"]["rope"]["_class"] == "titan_cfg.kernels.rope.KernelRoPE.Config"
        assert layer["attention"]["rope"]["implementation"] == "cpu"
        moe = layer["moe"]
        assert moe["load_balance_coeff"] is None
        assert (moe["router"]["num_experts"], moe["router"]["top_k"], moe["router"]["route_norm"]) == (8, 2, True)
        assert (moe["routed_experts"]["inner_experts"]["dim"], moe["routed_experts"]["inner_experts"]["hidden_dim"]) == (
            64, 48)


TRN2_WEIGHTS = {"native": ("qwen3-4b-instruct-2507", "Qwen3-4B-Instruct-2507"),
                "hf_backend": ("qwen3-4b-instruct-2507", "Qwen3-4B-Instruct-2507"),
                "moe": ("qwen3-30b-a3b-trimmed", "Qwen3-30B-A3B-trimmed")}


@pytest.mark.parametrize("scenario", ["native", "hf_backend", "moe"])
def test_trn2_render_matches_golden(tmp_path, config_only_folder, scenario):
    """trn2 renders from the published config.json of each walkthrough model (tests/fixtures):
    Qwen3-4B-Instruct-2507, and Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4."""
    weights = config_only_folder(*TRN2_WEIGHTS[scenario])
    run_dir = tmp_path / "runs" / f"{scenario}-trn2-golden"
    rendered = render(ScenarioRun(scenario=scenario, target="trn2", run_id=run_dir.name), weights, run_dir)
    from titanflow import paths

    files = _normalised(_rendered_files(Path(rendered.job_path).parent), {
        str(weights): "<WEIGHTS>", str(run_dir): "<RUN>",
        str(paths.cache_root()): "<CACHE>", str(paths.REPO_ROOT): "<REPO>",
    })
    golden = GOLDEN / f"{scenario}-trn2.json"
    if os.environ.get("TITANFLOW_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(files, indent=2, sort_keys=True) + "\n")
    assert files == json.loads(golden.read_text())


def test_trn2_moe_render_is_the_trimmed_30b_a3b_with_the_neuron_rope(tmp_path):
    golden = json.loads((GOLDEN / "moe-trn2.json").read_text())
    model = golden["trainer_config.json"]["model_spec"]["model"]
    assert golden["job.json"]["kernels"] == {"rope": "neuron", "attention": "sdpa"}
    assert (model["dim"], model["vocab_size"], len(model["layers"])) == (2048, 151936, 4)
    layer = model["layers"][0]
    assert layer["attention"]["rope"]["implementation"] == "neuron" and layer["attention"]["rope"]["theta"] == 1e6
    assert (layer["moe"]["num_experts"], layer["moe"]["router"]["top_k"]) == (64, 4)
    assert layer["moe"]["routed_experts"]["inner_experts"]["hidden_dim"] == 768
    parallelism = golden["trainer_config.json"]["parallelism"]
    assert (parallelism["tensor_parallel_degree"], parallelism["expert_parallel_degree"]) == (1, 1)
    assert "--nproc_per_node=64" in golden["launch.json"]["argv"]
    assert golden["launch.json"]["env"]["NEURON_LOGICAL_NC_CONFIG"] == "2"


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
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in launch["env"] and "NEURON_COMPILE_CACHE_URL" not in launch["env"]
    assert "NEURON_RT_NUM_CORES" not in launch["env"]  # the cores one process reserves, not the node's
    assert "0x" not in json.dumps(trainer)  # no memory addresses: renders compare equal


def test_pretrained_job_loads_the_folder_from_hf_model_only(tmp_path, tiny_assets):
    rendered = render(ScenarioRun(init="pretrained", weights=str(tiny_assets.weights_dir)), tiny_assets.weights_dir,
                      tmp_path / "run")
    checkpoint = _rendered_files(Path(rendered.job_path).parent)["trainer_config.json"]["checkpoint"]
    assert checkpoint["enable"] and checkpoint["initial_load_in_hf"] and checkpoint["initial_load_model_only"]
    assert checkpoint["initial_load_path"] == str(tiny_assets.weights_dir)
