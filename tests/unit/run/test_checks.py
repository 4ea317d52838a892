"""The checks of whether this machine can run a target (titanflow/run/checks.py, which ``titanflow doctor`` prints and
a trn2 run's preflight calls): each check's pass and fail path, with stand-ins of what this machine lacks
(tests/stand_ins/: torch-neuronx, nki, nkilib, the torchtitan fork, neuron-ls; .dist-info metadata for the trn2
stack's versions)."""

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.stand_ins import STAND_INS, installed_distributions, stand_ins

from titanflow.params import ScenarioRun
from titanflow.run import checks


#: The walkthrough's stack (profiles/trn2/constraints.txt): torch 2.14.0, torch-neuronx 2.14.3(.0.*), transformers 5.16.0.
TRN2_STACK = {"torch": "2.14.0", "torch-neuronx": "2.14.3.0.1234", "transformers": "5.16.0"}


@pytest.fixture()
def fork_importable(monkeypatch):
    """The stand-in fork first on sys.path, and the torchtitan this test process imported set aside, so
    find_spec answers as a fresh process (a rank) would."""
    monkeypatch.delitem(sys.modules, "torchtitan", raising=False)
    with stand_ins("fork") as folder:
        yield folder


@pytest.fixture()
def no_neuron_tools(monkeypatch, tmp_path):
    """No neuron-ls on PATH or in the DLAMI's tool folder."""
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "neuron-ls").exists()))
    monkeypatch.setattr(checks, "NEURON_TOOLS", tmp_path / "no-tools")


def test_python_against_the_profile():
    assert checks.check_python("cpu").ok  # this venv: 3.11
    failed = checks.check_python("trn2")
    assert not failed.ok and failed.detail == (f"{platform.python_version()} (trn2 needs Python 3.12: "
                                               "profiles/trn2/.python-version)")
    assert failed.fix == "make setup-trn2 (profiles/trn2/setup.sh) on the Neuron 2.33 DLAMI (its venv is Python 3.12)"
    assert checks.check_python("trn2", (3, 12, 3)).ok and not checks.check_python("trn2", (3, 13, 0)).ok


def test_python_is_read_from_the_files_setup_and_make_read(tmp_path, monkeypatch):
    """The walkthrough pins Python 3.12 (profiles/trn2/setup.sh checks the DLAMI's venv against it); doctor asks
    for what the profile's .python-version says, which setup.sh (trn2) and the Makefile (cpu) read too."""
    setup = subprocess.run(["bash", "profiles/trn2/setup.sh", "--print"], capture_output=True, text=True, check=True,
                           cwd=checks.paths.REPO_ROOT, env={**os.environ, "HOME": "/home/ubuntu"}).stdout
    assert "sys.version_info[:2] != (3, 12)" in setup.splitlines()[0] and checks.profile_python("trn2") == "3.12"
    # a make of its own, not a sub-make of `make test` (whose MAKEFLAGS would print "Entering directory" first)
    make = subprocess.run(["make", "--no-print-directory", "-n", "-B", ".venv/.installed"], capture_output=True,
                          text=True, check=True, cwd=checks.paths.REPO_ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")}).stdout
    assert 'v = "3.11"' in make.splitlines()[0] and checks.profile_python("cpu") == "3.11"
    shutil.copytree(checks.paths.REPO_ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "profiles" / "trn2" / ".python-version").write_text("3.13\n")
    monkeypatch.setattr(checks.paths, "REPO_ROOT", tmp_path)
    assert checks.check_python("trn2", (3, 13, 1)).ok and not checks.check_python("trn2", (3, 12, 3)).ok
    (tmp_path / "profiles" / "trn2" / ".python-version").unlink()
    assert checks.check_python("trn2").detail.endswith("the install profile names no Python "
                                                      "(profiles/trn2/.python-version is missing)")


def test_packages_against_the_profile(tmp_path):
    """cpu: this venv's torch 2.13.0+cpu, torchtitan 0.3.0, transformers 5.23.0 meet profiles/cpu. trn2: they do not,
    one line each; the walkthrough's versions (as .dist-info) do, torch-neuronx's 2.14.3.0.* included."""
    assert all(check.ok for check in checks.check_packages("cpu"))
    failed = {check.name: check for check in checks.check_packages("trn2")}
    assert set(failed) == {"package torch", "package torch-neuronx", "package transformers"}
    assert not any(check.ok for check in failed.values())
    assert failed["package torch-neuronx"].detail == "not installed (trn2 pins torch-neuronx==2.14.3.*)"
    with stand_ins(installed_distributions(tmp_path / "stack", **TRN2_STACK)):
        assert all(check.ok for check in checks.check_packages("trn2"))
    with stand_ins(installed_distributions(tmp_path / "old", **{**TRN2_STACK, "transformers": "5.23.0"})):
        assert [c.name for c in checks.check_packages("trn2") if not c.ok] == ["package transformers"]


def test_a_missing_profile_is_one_failed_line(tmp_path, monkeypatch):
    monkeypatch.setattr(checks.paths, "REPO_ROOT", tmp_path)
    (check,) = checks.check_packages("cpu")
    assert not check.ok and "profiles/cpu/constraints.txt" in check.detail


def test_the_fork_is_recognised_by_version_and_location(fork_importable, tmp_path):
    check = checks.check_fork()
    assert check.ok, check.line()
    assert check.detail.startswith(f"torchtitan 0.2.2+neuron.1 at {fork_importable / 'torchtitan'}: the fork")
    other = tmp_path / "older"
    shutil.copytree(fork_importable / "torchtitan", other / "torchtitan")
    with stand_ins(installed_distributions(other, torchtitan="0.2.1+neuron.3")):
        assert "another release of the fork" in checks.check_fork().detail and not checks.check_fork().ok


def test_upstream_torchtitan_is_not_the_fork(monkeypatch):
    monkeypatch.delitem(sys.modules, "torchtitan", raising=False)
    check = checks.check_fork()
    assert not check.ok and "torchtitan 0.3.0" in check.detail and "not the fork (upstream torchtitan)" in check.detail
    assert "git clone -b release-2.33 https://github.com/aws-neuron/torchtitan-neuron.git" in check.fix


def test_neuron_devices_from_neuron_ls(monkeypatch):
    """trn2.48xlarge: 16 devices x 8 physical cores = 128 = 64 ranks x LNC 2; neuron-ls sees 64 logical cores."""
    monkeypatch.setenv("PATH", f"{STAND_INS / 'bin'}{os.pathsep}{os.environ['PATH']}")
    check = checks.check_devices(ScenarioRun(target="trn2"))
    assert check.ok and check.detail == ("16 devices x 8 physical cores = 128 (neuron-ls --json-output); neuron-ls "
                                         "counts 64 logical cores; 64 ranks x LNC 2 need 128")
    # trn2-cluster's 2 x 64 ranks: a node is checked for its own 64
    assert checks.check_devices(ScenarioRun(target="trn2-cluster")).detail == check.detail
    monkeypatch.setenv("NEURON_LS_STAND_IN_DEVICES", "8")
    half = checks.check_devices(ScenarioRun(target="trn2"))
    assert not half.ok and "8 devices x 8 physical cores = 64" in half.detail and "--nproc-per-node 32 or fewer" in half.fix
    assert checks.check_devices(ScenarioRun(target="trn2", nproc=32, global_batch_size=32)).ok


def test_neuron_devices_from_dev_nodes(no_neuron_tools, tmp_path):
    """Without neuron-ls, the /dev/neuron<N> nodes: none here (fail), 16 on a node (pass)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    check = checks.check_devices(ScenarioRun(target="trn2"), dev_dir=dev)
    assert not check.ok and check.detail.startswith("0 devices x 8 physical cores = 0")
    for n in range(16):
        (dev / f"neuron{n}").touch()
    assert checks.check_devices(ScenarioRun(target="trn2"), dev_dir=dev).ok


def test_cuda_devices_against_the_ranks(monkeypatch):
    """The cuda target's 8 ranks (titan_cfg/targets.py) need 8 GPUs; this machine's torch is a CPU build."""
    import torch

    run = ScenarioRun(target="cuda")
    check = checks.check_cuda(run)
    assert not check.ok and check.detail == (f"torch.cuda.is_available() is False: torch {torch.__version__} is a CPU "
                                             "build (torch.version.cuda is None); 8 ranks need 8 GPUs")
    assert check.fix == ("run on a machine with 8 GPUs and their driver, and install the CUDA build of torch "
                         "==2.13.0 (PyTorch's index for your CUDA)")  # profiles/cpu/constraints.txt, cuda's pins
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    four = checks.check_cuda(run)
    assert not four.ok and four.detail == "4 CUDA devices (torch.cuda.device_count()); 8 ranks need 8"
    assert four.fix == "run on a machine with 8 GPUs, or pass --nproc-per-node 4 or fewer"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert checks.check_cuda(run).ok
    assert "cuda devices" in [c.name for c in checks.run_checks(run, None, with_weights=False)]
    assert "cuda devices" not in [c.name for c in checks.run_checks(ScenarioRun(), None, with_weights=False)]


def test_lnc_of_the_ranks_the_shell_and_the_compiler_flags(monkeypatch):
    run = ScenarioRun(target="trn2")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    assert checks.check_lnc(run).ok
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    shell = checks.check_lnc(run)
    assert not shell.ok and "this shell sets 1, the ranks get 2" in shell.detail
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--target trn2 --lnc 1")
    flags = checks.check_lnc(run)
    assert not flags.ok and "NEURON_CC_FLAGS compiles for LNC 1" in flags.detail  # neuronx-cc NCC_EVRF066
    monkeypatch.setenv("NEURON_CC_FLAGS", "--target trn2 --lnc=2")
    assert checks.check_lnc(run).ok


def test_the_nki_kernel_importable():
    """trn2's rope=neuron needs torch-neuronx, nki and nkilib's kernel module; cpu's implementations need nothing."""
    (failed,) = checks.check_kernels("trn2")
    assert (failed.name, failed.ok, failed.detail) == ("kernel rope=neuron", False, "torch_neuronx is not installed")
    with stand_ins("neuron"):
        (passed,) = checks.check_kernels("trn2")
    assert passed.ok and passed.detail == "torch_neuronx, nki, nkilib.core.embeddings.rope_hf import"
    assert checks.check_kernels("cpu") == []
    # a run checks the kernels it takes: moe on trn2 takes rope=neuron, native rope=reference (nothing to import)
    assert [c.name for c in checks.check_kernels("trn2", ScenarioRun(scenario="moe", target="trn2").kernels_resolved)
            ] == ["kernel rope=neuron"]
    assert checks.check_kernels("trn2", ScenarioRun(scenario="native", target="trn2").kernels_resolved) == []


def test_weights_complete_or_the_missing_piece_named(tiny_assets, tmp_path, monkeypatch):
    run = ScenarioRun()
    check, folder = checks.check_weights(run, str(tiny_assets.weights_dir))
    assert check.ok and folder == tiny_assets.weights_dir
    shards = tmp_path / "no-shards"
    shutil.copytree(tiny_assets.weights_dir, shards, ignore=shutil.ignore_patterns("*.safetensors"))
    check, _ = checks.check_weights(run, str(shards))
    assert not check.ok and "lacks tensors its config.json's model loads" in check.detail  # check_checkpoint's words
    assert check.fix.startswith(f"complete {shards} (the message says what it lacks)")  # the user's own: no id
    root = tmp_path / "weights-root"
    shutil.copytree(tiny_assets.weights_dir, root / "org" / "tiny")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(root))
    check, folder = checks.check_weights(run, "org/tiny")
    assert check.ok and folder == root / "org" / "tiny"


def test_the_weights_fix_is_the_exact_download_into_the_folder_a_run_reads(tmp_path, monkeypatch):
    """A Hub id not here: with $TITANFLOW_WEIGHTS_ROOT unset the download goes to the Hugging Face cache (named),
    with it set to <root>/<id>; a config-only folder (the published config.json, tests/fixtures) is completed in
    place for the id it claims (_name_or_path), a folder claiming none for the scenario's published id."""
    from helpers import FIXTURES
    from huggingface_hub import constants

    run = ScenarioRun(scenario="hf_backend", target="trn2", init="pretrained")
    monkeypatch.delenv("TITANFLOW_WEIGHTS_ROOT", raising=False)
    check, folder = checks.check_weights(run, "Qwen/Qwen3-4B-Instruct-2507")
    assert folder is None and check.detail == ("Qwen/Qwen3-4B-Instruct-2507: not on this machine ($TITANFLOW_WEIGHTS_ROOT "
                                               "unset, not in the Hugging Face cache)")
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 (into the Hugging Face cache {constants.HF_HUB_CACHE})"
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(tmp_path / "root"))
    check, _ = checks.check_weights(run, "Qwen/Qwen3-4B-Instruct-2507")
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {tmp_path}/root/Qwen/Qwen3-4B-Instruct-2507"
    claimed = tmp_path / "instruct"
    shutil.copytree(FIXTURES / "qwen3-4b-instruct-2507", claimed)
    check, folder = checks.check_weights(run, str(claimed))
    assert not check.ok and folder == claimed and "has no tokenizer.json" in check.detail
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {claimed}"
    anonymous = tmp_path / "anonymous"
    anonymous.mkdir()
    config = json.loads((claimed / "config.json").read_text())
    del config["_name_or_path"]
    (anonymous / "config.json").write_text(json.dumps(config))
    check, _ = checks.check_weights(run, str(anonymous))
    assert check.fix == (f"if {anonymous} is to hold Qwen/Qwen3-4B-Instruct-2507 (the weights hf_backend on trn2 is "
                         f"published with): hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {anonymous}; else pass "
                         "--weights a complete Hugging Face folder")


def test_dataset_present_or_named(fork_importable, monkeypatch):
    assert checks.check_dataset(ScenarioRun()).ok  # cpu: the committed Botchan text
    trn2 = checks.check_dataset(ScenarioRun(target="trn2"))
    assert trn2.ok and trn2.detail.startswith(f"c4_test at {fork_importable / 'tests' / 'assets' / 'c4_test'}")


def test_dataset_missing_without_the_fork_checkout(monkeypatch):
    monkeypatch.delitem(sys.modules, "torchtitan", raising=False)
    monkeypatch.delenv("TITANFLOW_C4_TEST", raising=False)
    check = checks.check_dataset(ScenarioRun(target="trn2"))
    assert not check.ok and check.detail.endswith(": missing") and "TITANFLOW_C4_TEST" in check.fix


def test_compile_cache_writable(tmp_path, monkeypatch):
    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    assert checks.check_compile_cache().ok and (tmp_path / "cache" / "compile").is_dir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TITANFLOW_CACHE", str(blocker / "cache"))
    check = checks.check_compile_cache()
    assert not check.ok and check.fix == "export TITANFLOW_CACHE=<a writable folder>"


def test_disk_for_what_the_run_writes(tiny_assets, tmp_path, monkeypatch):
    """The figure is titanflow.run.disk's: 12 bytes a parameter for each step checkpoint kept (2 of the default run's
    10 steps at the cpu target's interval, within keep_latest_k + 1 = 3), 2 x 4 for the float32 export, 128 MiB for logs
    and the rest;
    parameters counted here from the tensors."""
    from safetensors.torch import load_file

    from titanflow.run import disk

    parameters = sum(t.numel() for f in tiny_assets.weights_dir.glob("*.safetensors") for t in load_file(f).values())
    run = ScenarioRun(runs_dir=str(tmp_path / "runs"))
    saves = 10 // run.checkpoint_interval_resolved
    assert disk.run_bytes(run, parameters) == disk.RunBytes(12 * parameters * min(saves, 3), 8 * parameters, 2**27)
    assert checks.check_disk(run, tiny_assets.weights_dir).ok
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 1, 1))
    full = checks.check_disk(run, tiny_assets.weights_dir)
    assert not full.ok and full.detail.startswith(f"0.00 GiB free at {tmp_path}, the run writes up to ")
    assert full.detail.endswith(f"({parameters:,} parameters, counted from the safetensors headers)")


def qwen3_dense_parameters(config: dict) -> int:
    """Parameters of a tied Qwen3 dense checkpoint by hand from its config.json: the embedding, per layer q/k/v/o,
    q/k norms, the gated MLP and two norms, and the final norm (transformers' Qwen3 modelling, written out)."""
    hidden, heads, kv, head_dim = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                       "head_dim"))
    layer = (2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim + 2 * head_dim
             + 3 * hidden * config["intermediate_size"] + 2 * hidden)
    return config["vocab_size"] * hidden + config["num_hidden_layers"] * layer + hidden


def test_disk_before_the_weights_are_downloaded_is_estimated_from_config_json(tmp_path, monkeypatch):
    """Qwen3-4B-Instruct-2507's published config.json alone: 4,022,468,096 parameters (the model card's 4.0B),
    the float32 export 2 x 4 bytes each, and the download 2 bytes each (torch_dtype bfloat16), both on one disk."""
    from helpers import FIXTURES

    folder = tmp_path / "instruct"
    shutil.copytree(FIXTURES / "qwen3-4b-instruct-2507", folder)
    parameters = qwen3_dense_parameters(json.loads((folder / "config.json").read_text()))
    assert parameters == 4_022_468_096
    assert checks.model_size(folder) == checks.ModelSize(parameters, "estimated from config.json", False, "bfloat16",
                                                         2 * parameters)
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**39, 30 * 2**30))
    run = ScenarioRun(scenario="hf_backend", target="trn2", runs_dir=str(tmp_path / "runs"))
    check = checks.check_disk(run, folder)
    gib, saves = 2**30, 10 // run.checkpoint_interval_resolved
    trained = parameters + 151_936 * 2560  # hf_backend unties the checkpoint's tied lm_head (vocab x hidden) for FSDP
    checkpoints, export, logs = 12 * trained * min(saves, 3), 8 * trained, 2**27
    writes = checkpoints + export + logs
    assert not check.ok and check.detail == (
        f"30.00 GiB free at {tmp_path}, the run writes up to {writes / gib:.2f} GiB (step checkpoints "
        f"{checkpoints / gib:.2f} GiB, export {export / gib:.2f} GiB, logs and the rest 0.12 GiB) and the weights' download "
        f"{2 * parameters / gib:.2f} GiB (bfloat16) into {folder}: {(writes + 2 * parameters) / gib:.2f} GiB in all "
        "(4,022,468,096 parameters, estimated from config.json)")
    assert f"{export / gib:.2f}" == "32.87"
    assert check.fix.endswith("; or free space there, or download the weights to a larger disk")  # both, one disk
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**39, 2**39))
    assert checks.check_disk(run, folder).ok  # 512 GiB free
