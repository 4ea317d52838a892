"""render_config: the job files, and the trn2 target pinned by golden files, one per scenario x init x mode
(goldens/renders/<scenario>-trn2-<init>.json, and <scenario>-trn2-<init>-walkthrough.json for --model-spec
walkthrough).

Regenerate the goldens after an intended change with:
    TITANFLOW_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/launch/test_render.py
"""

import json
import os
from pathlib import Path

import pytest

from titan_cfg.job import JOB_ENV, Job
from titan_cfg.scenarios import SCENARIOS, on_node
from titanflow import paths
from titanflow.judge.goldens import RENDER_DIR
from titanflow.launch.render import render
from titanflow.params import ScenarioRun

GOLDEN = RENDER_DIR


def _rendered_files(job_dir: Path) -> dict:
    files = {name: json.loads((job_dir / name).read_text()) for name in ("job.json", "launch.json", "trainer_config.json")}
    if "srun" in (job_dir / "launch.sh").read_text():  # a Slurm job: its batch script is part of what is pinned
        files["launch.sh"] = (job_dir / "launch.sh").read_text().splitlines()
    return files


def test_cpu_job_matches_the_weights_folder(tmp_path, tiny_assets):
    rendered = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    files = _rendered_files(Path(rendered.job_path).parent)
    job, launch, trainer = files["job.json"], files["launch.json"], files["trainer_config.json"]
    assert (job["local_batch_size"], job["global_batch_size"], job["seq_len"], job["steps"]) == (2, 4, 256, 3)
    # the cpu target forks its ranks (Target.fork_ranks): torchrun's own arguments, through titan_cfg.forked_torchrun
    assert launch["argv"][:5] == ["python", "-m", "titan_cfg.forked_torchrun", "--standalone", "--nproc_per_node=2"]
    assert launch["argv"][-8:] == ["--start-method", "fork", "--run-path", str(paths.REPO_ROOT / "titan_cfg" / "forked_rank.py"),
                                   "--module", "titan_cfg.config_registry", "--config", "titanflow_job"]
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
    # every step's line, and plain text: it goes to train.log and the Prefect log, not to a terminal
    assert trainer["metrics"]["log_freq"] == 1 and trainer["metrics"]["disable_color_printing"] is True
    assert Job.read(Path(rendered.job_path)).export_step_dir == tmp_path / "run" / "train" / "checkpoint" / "step-3"


def test_a_random_init_render_says_nothing_of_an_initial_load_it_does_not_make(tmp_path, tiny_assets, caplog):
    """No initial load (random init): initial_load_model_only rendered False, and torchtitan's "initial_load_model_only
    =True has no effect without an initial_load_path" (its config functions' default checkpoint config logs it as
    it is built) is not in the log; a pretrained render loads model only, from the weights folder."""
    caplog.set_level("WARNING")
    rendered = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    checkpoint = _rendered_files(Path(rendered.job_path).parent)["trainer_config.json"]["checkpoint"]
    assert (checkpoint["initial_load_path"], checkpoint["initial_load_model_only"]) == (None, False)
    assert "initial_load_path" not in caplog.text
    pretrained = render(ScenarioRun(steps=3, init="pretrained", weights=str(tiny_assets.weights_dir)),
                        tiny_assets.weights_dir, tmp_path / "pretrained")
    checkpoint = _rendered_files(Path(pretrained.job_path).parent)["trainer_config.json"]["checkpoint"]
    assert (checkpoint["initial_load_path"], checkpoint["initial_load_model_only"]) == (
        str(tiny_assets.weights_dir), True)


def test_a_config_torchtitan_rejects_fails_the_render_naming_the_error(tmp_path, tiny_assets):
    """The config is built in the rendering process (titanflow.launch.render.build_config): an error of the build
    becomes a RenderError that names it. A job whose activation checkpointing is none of torchtitan's modes
    (model_copy skips the job's own check of the field) stands for any config the build refuses."""
    from titanflow.launch.render import RenderError, build_config, make_job

    job = make_job(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    assert build_config(job)["training"]["steps"] == 3
    with pytest.raises(RenderError, match=r"^torchtitan rejected the rendered config: KeyError: 'everything'$"):
        build_config(job.model_copy(update={"activation_checkpoint": "everything"}))


@pytest.mark.parametrize("callers, ranks", [
    (None, "glibc.malloc.hugetlb=1"),  # the cpu target's own (titan_cfg/targets.py)
    ("glibc.malloc.arena_max=1", "glibc.malloc.arena_max=1:glibc.malloc.hugetlb=1"),  # the caller's kept, first
    ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"),  # the caller turns huge pages off
])
def test_the_ranks_get_the_callers_glibc_tunables_before_the_targets(monkeypatch, callers, ranks):
    from titanflow.assets import ensure_assets
    from titanflow.launch.render import launch_line, make_job

    if callers is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", callers)
    job = make_job(ScenarioRun(steps=3), ensure_assets().weights_dir, Path("/tmp/run"))
    _, env = launch_line(job, Path("/tmp/run/job/job.json"))
    assert env["GLIBC_TUNABLES"] == ranks


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


#: Scenario -> (the config-only fixture folder of the weights its trn2 runs train, the folder's name): the Hub
#: model's name (titan_cfg.scenarios.ON_NODE), "-trimmed" when the run trims it (tests/fixtures/).
TRN2_WEIGHTS = {scenario: (name.lower(), name) for scenario in SCENARIOS
                for row in [on_node(scenario, "trn2")]
                for name in [row.weights.split("/")[-1] + ("-trimmed" if row.trim else "")]}
#: The goldens: every scenario x init in both modes, titanflow's defaults and the walkthrough's (--model-spec).
TRN2_RENDERS = [(scenario, init, mode) for scenario in TRN2_WEIGHTS for init in ("random", "pretrained")
                for mode in ("config", "walkthrough")]
#: The trn2-cluster golden: scenario 2 on two trn2.48xlarge nodes under Slurm.
CLUSTER_RENDERS = [("native", "random")]


def golden_name(scenario: str, init: str, model_spec: str = "config", target: str = "trn2") -> str:
    """``<scenario>-<target>-<init>[-walkthrough].json``."""
    return f"{scenario}-{target}-{init}{'-walkthrough' if model_spec == 'walkthrough' else ''}.json"


@pytest.mark.parametrize(("scenario", "init", "model_spec", "target"), [
    *((*render, "trn2") for render in TRN2_RENDERS), *((*render, "config", "trn2-cluster") for render in CLUSTER_RENDERS)])
def test_trn2_render_matches_golden(tmp_path, config_only_folder, scenario, init, model_spec, target, monkeypatch):
    """trn2 renders from the published config.json of each walkthrough model (tests/fixtures):
    Qwen3-4B-Instruct-2507, and Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4. Files only
    (``titanflow render``): here there are no weights, no Neuron device and no c4_test. trn2-cluster's golden
    also pins its Slurm batch script. The ranks' environment carries the caller's own PYTHONPATH and GLIBC_TUNABLES
    (titanflow.launch.render.launch_line): the goldens are renders from a caller without either."""
    for name in ("PYTHONPATH", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    weights = config_only_folder(*TRN2_WEIGHTS[scenario])
    run_dir = tmp_path / "runs" / golden_name(scenario, init, model_spec, target).removesuffix(".json")
    run = ScenarioRun(scenario=scenario, target=target, init=init, model_spec=model_spec, run_id=run_dir.name)
    rendered = render(run, weights, run_dir, files_only=True)
    from titanflow.launch.dataset import torchtitan_checkout

    files = _normalised(_rendered_files(Path(rendered.job_path).parent), {
        str(weights): "<WEIGHTS>", str(run_dir): "<RUN>", str(torchtitan_checkout()): "<TORCHTITAN_CHECKOUT>",
        str(paths.cache_root()): "<CACHE>", str(paths.REPO_ROOT): "<REPO>",
    })
    golden = GOLDEN / golden_name(scenario, init, model_spec, target)
    if os.environ.get("TITANFLOW_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(files, indent=2, sort_keys=True) + "\n")
    assert files == json.loads(golden.read_text())


def test_the_goldens_are_exactly_the_renders_pinned():
    assert sorted(p.name for p in GOLDEN.glob("*.json")) == sorted(
        [golden_name(*r) for r in TRN2_RENDERS] + [golden_name(*r, target="trn2-cluster") for r in CLUSTER_RENDERS])


def test_one_node_jobs_stay_as_they_were_and_launch_standalone(tmp_path, tiny_assets):
    """A job of one node writes no ``nnodes`` (job.json byte for byte as before jobs had nodes: the trn2 goldens
    above are unchanged) and launches ``torchrun --standalone``; its launch.sh is not a batch script."""
    rendered = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    job_dir = Path(rendered.job_path).parent
    assert "nnodes" not in json.loads((job_dir / "job.json").read_text()) and rendered.scheduler == "local"
    assert Job.read(Path(rendered.job_path)).nnodes == 1
    assert "--standalone" in rendered.argv and not (job_dir / "launch.sh").read_text().count("SBATCH")


def test_two_cpu_nodes_of_one_rank_render_a_slurm_job_of_the_same_workload(tmp_path, tiny_assets):
    """cpu, 2 nodes x 1 rank: world size 2, so global batch 4 is 2 per rank, the same as 1 node x 2 ranks; the
    launch is torchrun's c10d rendezvous (never --standalone) with per-node placeholders, in a Slurm batch
    script of 2 nodes x 1 task that runs titanflow.launch.node on each."""
    from titanflow.launch.render import NODE_PLACEHOLDERS, RANK_PREFIX

    run = ScenarioRun(steps=3, nnodes=2, nproc_per_node=1)
    assert (run.world_size, run.scheduler_resolved) == (2, "slurm")
    rendered = render(run, tiny_assets.weights_dir, tmp_path / "run")
    files = _rendered_files(Path(rendered.job_path).parent)
    job, argv = files["job.json"], files["launch.json"]["argv"]
    assert (job["nnodes"], job["world_size"], job["global_batch_size"], job["local_batch_size"]) == (2, 2, 4, 2)
    assert rendered.scheduler == "slurm" and "--standalone" not in argv
    assert argv[:10] == ["python", "-m", "titan_cfg.forked_torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
                        f"--rdzv-endpoint={NODE_PLACEHOLDERS['endpoint']}", f"--rdzv-id={NODE_PLACEHOLDERS['rdzv_id']}",
                        "--rdzv-conf=join_timeout=600", "--max-restarts=0"]
    assert argv[argv.index("--log-dir") + 1] == str(tmp_path / "run" / "train" / "ranks" / "${TITANFLOW_NODE}")
    assert files["launch.json"]["env"].items() >= RANK_PREFIX.items()
    script = files["launch.sh"]
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive"} <= set(script)
    srun = script[-1]
    assert srun.startswith("srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 python -m titanflow.launch.node ")
    assert "'--rdzv-endpoint=${TITANFLOW_RDZV_ENDPOINT}'" in srun  # quoted: each node expands it (titanflow.launch.node)


def test_trn2_cluster_is_trn2_nodes_with_efa_and_a_global_batch_per_node(config_only_folder):
    """The trn2-cluster golden: each node the trn2 render (64 ranks at LNC=2, batch 1 per rank), 2 nodes, the EFA
    settings of titan_cfg.targets.EFA_ENV on every rank; its trainer config differs from one node's only in the
    global batch (64 per node)."""
    from titan_cfg.targets import EFA_ENV

    cluster = json.loads((GOLDEN / golden_name("native", "random", target="trn2-cluster")).read_text())
    node = json.loads((GOLDEN / golden_name("native", "random")).read_text())
    argv, env = cluster["launch.json"]["argv"], cluster["launch.json"]["env"]
    assert {"--nnodes=2", "--nproc_per_node=64", "--rdzv-backend=c10d"} <= set(argv) and "--standalone" not in argv
    assert env.items() >= {**EFA_ENV, "NEURON_LOGICAL_NC_CONFIG": "2"}.items() and "NEURON_RT_ROOT_COMM_ID" not in env
    job = cluster["job.json"]
    assert (job["nnodes"], job["world_size"], job["global_batch_size"], job["local_batch_size"]) == (2, 128, 128, 1)
    ours, theirs = cluster["trainer_config.json"], node["trainer_config.json"]
    differing = {(k, sub) for k in ours for sub in ours[k] if isinstance(ours[k], dict) and ours[k][sub] != theirs[k][sub]}
    assert differing == {("training", "global_batch_size")}
    assert {k for k in ours if not isinstance(ours[k], dict) and ours[k] != theirs[k]} == set()
    assert "#SBATCH --nodes=2" in cluster["launch.sh"]


def test_trn2_hf_backend_goldens_carry_the_walkthroughs_published_figures_and_its_data():
    """Scenario 1 on trn2 is the workload of the walkthrough's figures (c4_test, 64 ranks x 1 x 2048
    tokens): pretrained is held to 6.54, random init reports 12.43 beside the derived value."""
    for init, figure, role in (("pretrained", 6.54, "expectation"), ("random", 12.43, "beside")):
        job = json.loads((GOLDEN / golden_name("hf_backend", init)).read_text())["job.json"]
        assert job["weights_id"] == "Qwen/Qwen3-4B-Instruct-2507"
        assert (job["published"]["first_step_loss"], job["published"]["role"]) == (figure, role)
        assert job["published"]["source"].startswith("AWS walkthrough") and job["published"]["workload_differences"] == []
        assert (job["dataset"], job["world_size"], job["local_batch_size"], job["seq_len"]) == ("c4_test", 64, 1, 2048)
        assert job["dataset_path"] == "<TORCHTITAN_CHECKOUT>/tests/assets/c4_test"
    native = json.loads((GOLDEN / golden_name("native", "pretrained")).read_text())["job.json"]
    assert native["published"] is None  # the walkthrough states no figure for scenario 2


def test_the_walkthrough_switch_differs_from_the_default_in_the_spec_warm_up_and_export_dtype():
    """``model_registry("4B", attn_backend="sdpa")`` in ``qwen3_32b()`` against the spec from config.json:
    the 4B flavor's rope_theta 1e6 and 40960-token RoPE cache (Instruct-2507's config.json: 5e6, 262144), and
    qwen3_32b()'s warm-up (600, capped to the 10 steps) and float16 export (titan_cfg.scenarios.Scenario.walkthrough);
    everything else the same, the attention included (causal over the packed row, trn2's default)."""
    default = json.loads((GOLDEN / golden_name("native", "random")).read_text())
    walkthrough = json.loads((GOLDEN / golden_name("native", "random", "walkthrough")).read_text())
    ours, theirs = default["trainer_config.json"], walkthrough["trainer_config.json"]
    assert {k for k in ours if ours[k] != theirs[k]} == {"model_spec", "lr_scheduler", "checkpoint"}
    assert (ours["lr_scheduler"]["warmup_steps"], theirs["lr_scheduler"]["warmup_steps"]) == (2, 10)
    assert {k for k in ours["checkpoint"] if ours["checkpoint"][k] != theirs["checkpoint"][k]} == {"export_dtype"}
    assert (ours["checkpoint"]["export_dtype"], theirs["checkpoint"]["export_dtype"]) == ("float32", "float16")
    assert ours["loss"]["loss_fn"]["global_vocab_size"] == theirs["loss"]["loss_fn"]["global_vocab_size"] == 151936
    rope = [m["model"]["layers"][0]["attention"]["rope"] for m in (ours["model_spec"], theirs["model_spec"])]
    assert [(r["theta"], r["max_seq_len"]) for r in rope] == [(5_000_000, 262144), (1_000_000, 40960)]
    assert (ours["model_spec"]["flavor"], theirs["model_spec"]["flavor"]) == ("hf:Qwen3-4B-Instruct-2507", "4B")
    attention = [m["model"]["layers"][0]["attention"]["inner_attention"] for m in (ours["model_spec"], theirs["model_spec"])]
    assert attention[0] == attention[1] and attention[0]["implementation"] == "causal"
    assert ours["dataloader"] == theirs["dataloader"]
    assert ours["dataloader"]["_class"] == "titan_cfg.packed_row.PackedRowDataLoader.Config"


def test_the_walkthrough_mode_of_each_trn2_scenario_is_its_config_functions():
    """moe: upstream's expert-bias load balancing (1e-3) where the default has it off; hf_backend: the
    SelectiveAC of transformers_modeling_backend_full() where the trn2 default checkpoints fully."""
    for scenario, differs in (("moe", {"model_spec", "lr_scheduler", "checkpoint"}),
                              ("hf_backend", {"activation_checkpoint"})):
        default = json.loads((GOLDEN / golden_name(scenario, "random")).read_text())["trainer_config.json"]
        walkthrough = json.loads((GOLDEN / golden_name(scenario, "random", "walkthrough")).read_text())[
            "trainer_config.json"]
        assert {k for k in default if default[k] != walkthrough[k]} == differs, scenario
    moe = [json.loads((GOLDEN / golden_name("moe", "random", mode)).read_text())["trainer_config.json"]
           for mode in ("config", "walkthrough")]
    assert [m["model_spec"]["model"]["layers"][0]["moe"]["load_balance_coeff"] for m in moe] == [None, 1e-3]
    hf = [json.loads((GOLDEN / golden_name("hf_backend", "random", mode)).read_text())["trainer_config.json"]
          for mode in ("config", "walkthrough")]
    assert [h["activation_checkpoint"]["_class"].rsplit(".", 2)[-2] for h in hf] == ["FullAC", "SelectiveAC"]


def test_trn2_moe_render_is_the_trimmed_30b_a3b_with_the_neuron_rope(tmp_path):
    golden = json.loads((GOLDEN / golden_name("moe", "random")).read_text())
    model = golden["trainer_config.json"]["model_spec"]["model"]
    assert golden["job.json"]["kernels"] == {"rope": "neuron", "attention": "causal"}
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
    rendered = render(ScenarioRun(target="trn2"), instruct_2507_folder, tmp_path / "run", files_only=True)
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


def test_the_render_command_gives_instruct_2507_the_published_expectation(tmp_path, monkeypatch, capsys):
    """The fixture folder holds config.json only; its ``_name_or_path`` names the weights
    (titanflow.weights.identity), so the job carries the walkthrough's 6.54 and where it comes from."""
    from helpers import FIXTURES

    from titanflow.cli import main

    assert main(["render", "hf_backend", "--target", "trn2", "--init", "pretrained", "--weights",
                 str(FIXTURES / "qwen3-4b-instruct-2507"), "--runs-dir", str(tmp_path)]) == 0
    job = Job.read(Path(capsys.readouterr().out.strip()) / "job.json")
    assert job.published.first_step_loss == 6.54 and job.published.band == 0.05 and job.published.role == "expectation"
    assert "Train Qwen3 on AWS Trainium with torchtitan" in job.published.source
    assert job.files_only and job.weights_id == "Qwen/Qwen3-4B-Instruct-2507"


def test_a_trn2_job_to_run_needs_c4_test_and_records_how_it_was_found(tmp_path, instruct_2507_folder, monkeypatch):
    from titanflow.launch.dataset import C4_TEST_ENV

    monkeypatch.delenv(C4_TEST_ENV, raising=False)
    with pytest.raises(ValueError, match="dataset: c4_test not found at .*tests/assets/c4_test"):
        render(ScenarioRun(target="trn2"), instruct_2507_folder, tmp_path / "absent")
    c4_test = tmp_path / "c4_test"
    c4_test.mkdir()
    (c4_test / "c4_test.json").write_text('{"text": "a document"}\n')
    monkeypatch.setenv(C4_TEST_ENV, str(c4_test))
    job = Job.read(Path(render(ScenarioRun(target="trn2"), instruct_2507_folder, tmp_path / "run").job_path))
    assert (job.dataset, job.dataset_path, job.dataset_located_by) == ("c4_test", str(c4_test), f"${C4_TEST_ENV}")
    assert not job.files_only


def test_cpu_jobs_name_their_text_botchan(tmp_path, tiny_assets):
    rendered = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "run")
    job = Job.read(Path(rendered.job_path))
    assert (job.dataset, rendered.dataset) == ("botchan", "botchan")
    assert job.dataset_path.endswith("assets/botchan_c4") and job.dataset_located_by == "committed with titanflow"
    assert job.published is None and job.weights_id is None  # the embedded tiny model: no published figure


def test_the_ranks_refuse_a_files_only_job(tmp_path, instruct_2507_folder, monkeypatch):
    """A files-only render checked config.json alone: launched by hand, a pretrained load of a folder without
    safetensors would train from random init, so torchtitan's config function refuses it."""
    from titan_cfg.config_registry import titanflow_job

    rendered = render(ScenarioRun(target="trn2"), instruct_2507_folder, tmp_path / "run", files_only=True)
    monkeypatch.setenv(JOB_ENV, rendered.job_path)
    with pytest.raises(RuntimeError, match="rendered files-only"):
        titanflow_job()


def test_the_render_command_says_which_weights_it_used(tmp_path, monkeypatch, capsys, tiny_assets):
    """cpu, init pretrained, no --weights: the embedded tiny checkpoint, pretrained on first use (minutes of CPU),
    said before it is built and named after; here a stand-in returns the tiny folder instead of pretraining."""
    from titanflow.cli import main
    from titanflow.run import pretrained

    monkeypatch.setattr(pretrained, "ensure_pretrained", lambda model_type: tiny_assets.weights_dir)
    assert main(["render", "native", "--init", "pretrained", "--runs-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert Path(out.strip()).name == "job" and err == (
        "titanflow: weights: none given for init pretrained: the embedded tiny qwen3's pretrained checkpoint "
        "(titanflow.run.pretrained: pretrained on this CPU on first use, then kept in the cache)\n"
        f"titanflow: weights: {tiny_assets.weights_dir.resolve()} (the embedded tiny qwen3's pretrained checkpoint)\n")
    assert main(["render", "native", "--runs-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().err == f"titanflow: weights: {tiny_assets.weights_dir.resolve()} (the embedded tiny qwen3)\n"


@pytest.mark.parametrize("target, rope", [("cpu", "cpu"), ("trn2", "neuron")])
def test_a_rope_kernel_is_refused_before_anything_runs_for_the_transformers_backend(target, rope):
    """The rope kernels replace a module of torchtitan's own decoder, which hf_backend's model is not: refused with
    the run's parameters (the command's exit 2 in under a second), not when torchtitan's config is built."""
    with pytest.raises(ValueError, match=rf"kernels: rope={rope} replaces a module of torchtitan's own decoder; "
                                         r"hf_backend trains transformers' model .*; fix: pass --kernels rope=reference \["):
        ScenarioRun(scenario="hf_backend", target=target, kernels={"rope": rope})
    assert ScenarioRun(scenario="moe", target=target, kernels={"rope": rope}).kernels_resolved["rope"] == rope


def test_the_render_command_refuses_a_job_it_cannot_render_with_exit_2_and_leaves_no_folder(tmp_path, monkeypatch,
                                                                                           capsys, tiny_assets):
    """A RenderError of the render (here torchtitan's config refused, by a stand-in build) is bad input: exit 2, the
    message, and the run folder the command made is gone."""
    from titanflow.cli import main
    from titanflow.launch import render as rendering

    def refused(job):
        raise rendering.RenderError("torchtitan rejected the rendered config: ValueError: planted")

    monkeypatch.setattr(rendering, "build_config", refused)
    assert main(["render", "native", "--run-id", "refused", "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(
        "titanflow: bad input:\ntorchtitan rejected the rendered config: ValueError: planted\n")
    assert not (tmp_path / "refused").exists()


def test_each_scenarios_loss_chunks_are_its_rendered_configs_and_seq_len_is_checked_against_them(tmp_path,
                                                                                                 tiny_assets):
    """Scenario.loss_chunks is what torchtitan's config says (loss.num_chunks of the cpu render; none for an unchunked
    loss), so a seq_len that does not split into them is refused before launch, not in the ranks' first loss."""
    from pydantic import ValidationError

    from titan_cfg.scenarios import SCENARIOS
    from titanflow.assets import TINY_MOE, ensure_assets

    weights = {"qwen3": tiny_assets.weights_dir, "qwen3_moe": ensure_assets(spec=TINY_MOE).weights_dir}
    for scenario, spec in SCENARIOS.items():
        done = render(ScenarioRun(scenario=scenario, steps=3), weights[spec.model_type], tmp_path / scenario)
        loss = json.loads(Path(done.job_path).with_name("trainer_config.json").read_text())["loss"]
        assert loss.get("num_chunks") == spec.loss_chunks, scenario
    assert (SCENARIOS["native"].loss_chunks, SCENARIOS["hf_backend"].loss_chunks) == (8, None)
    with pytest.raises(ValidationError, match="seq_len: 17 tokens do not split into the 8 chunks of native's loss"):
        ScenarioRun(seq_len=17)
    with pytest.raises(ValidationError, match="pass a multiple of 8, e.g. --seq-len 16 or 24"):
        ScenarioRun(scenario="moe", seq_len=20)
    assert ScenarioRun(seq_len=24).seq_len_resolved == 24
