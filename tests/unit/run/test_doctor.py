"""``titanflow doctor`` (titanflow/run/doctor.py): each check's pass and fail path, with stand-ins of what this
machine lacks (tests/stand_ins/: torch-neuronx, nki, nkilib, the torchtitan fork, neuron-ls; .dist-info
metadata for the trn2 stack's versions), the command's exit codes, and a trn2 run refused before anything runs."""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.stand_ins import STAND_INS, generated_fork, installed_distributions, stand_ins

from titan_cfg import upstream
from titanflow.params import ScenarioRun
from titanflow.run import doctor

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
    monkeypatch.setattr(doctor, "NEURON_TOOLS", tmp_path / "no-tools")


def test_python_against_the_profile():
    assert doctor.check_python("cpu").ok  # this venv: 3.11
    failed = doctor.check_python("trn2")
    assert not failed.ok and failed.detail == (f"{platform.python_version()} (trn2 needs Python 3.12: "
                                               "profiles/trn2/.python-version)")
    assert failed.fix == "make setup-trn2 (profiles/trn2/setup.sh) on the Neuron 2.33 DLAMI (its venv is Python 3.12)"
    assert doctor.check_python("trn2", (3, 12, 3)).ok and not doctor.check_python("trn2", (3, 13, 0)).ok


def test_python_is_read_from_the_files_setup_and_make_read(tmp_path, monkeypatch):
    """The walkthrough pins Python 3.12 (profiles/trn2/setup.sh checks the DLAMI's venv against it); doctor asks
    for what the profile's .python-version says, which setup.sh (trn2) and the Makefile (cpu) read too."""
    setup = subprocess.run(["bash", "profiles/trn2/setup.sh", "--print"], capture_output=True, text=True, check=True,
                           cwd=doctor.paths.REPO_ROOT, env={**os.environ, "HOME": "/home/ubuntu"}).stdout
    assert "sys.version_info[:2] != (3, 12)" in setup.splitlines()[0] and doctor.profile_python("trn2") == "3.12"
    # a make of its own, not a sub-make of `make test` (whose MAKEFLAGS would print "Entering directory" first)
    make = subprocess.run(["make", "--no-print-directory", "-n", "-B", ".venv/.installed"], capture_output=True,
                          text=True, check=True, cwd=doctor.paths.REPO_ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")}).stdout
    assert 'v = "3.11"' in make.splitlines()[0] and doctor.profile_python("cpu") == "3.11"
    shutil.copytree(doctor.paths.REPO_ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "profiles" / "trn2" / ".python-version").write_text("3.13\n")
    monkeypatch.setattr(doctor.paths, "REPO_ROOT", tmp_path)
    assert doctor.check_python("trn2", (3, 13, 1)).ok and not doctor.check_python("trn2", (3, 12, 3)).ok
    (tmp_path / "profiles" / "trn2" / ".python-version").unlink()
    assert doctor.check_python("trn2").detail.endswith("the install profile names no Python "
                                                      "(profiles/trn2/.python-version is missing)")


def test_packages_against_the_profile(tmp_path):
    """cpu: this venv's torch 2.13.0+cpu, torchtitan 0.3.0, transformers 5.23.0 meet profiles/cpu. trn2: they do not,
    one line each; the walkthrough's versions (as .dist-info) do, torch-neuronx's 2.14.3.0.* included."""
    assert all(check.ok for check in doctor.check_packages("cpu"))
    failed = {check.name: check for check in doctor.check_packages("trn2")}
    assert set(failed) == {"package torch", "package torch-neuronx", "package transformers"}
    assert not any(check.ok for check in failed.values())
    assert failed["package torch-neuronx"].detail == "not installed (trn2 pins torch-neuronx==2.14.3.*)"
    with stand_ins(installed_distributions(tmp_path / "stack", **TRN2_STACK)):
        assert all(check.ok for check in doctor.check_packages("trn2"))
    with stand_ins(installed_distributions(tmp_path / "old", **{**TRN2_STACK, "transformers": "5.23.0"})):
        assert [c.name for c in doctor.check_packages("trn2") if not c.ok] == ["package transformers"]


def test_a_missing_profile_is_one_failed_line(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor.paths, "REPO_ROOT", tmp_path)
    (check,) = doctor.check_packages("cpu")
    assert not check.ok and "profiles/cpu/constraints.txt" in check.detail


def test_the_fork_is_recognised_by_version_and_location(fork_importable, tmp_path):
    check = doctor.check_fork()
    assert check.ok, check.line()
    assert check.detail.startswith(f"torchtitan 0.2.2+neuron.1 at {fork_importable / 'torchtitan'}: the fork")
    other = tmp_path / "older"
    shutil.copytree(fork_importable / "torchtitan", other / "torchtitan")
    with stand_ins(installed_distributions(other, torchtitan="0.2.1+neuron.3")):
        assert "another release of the fork" in doctor.check_fork().detail and not doctor.check_fork().ok


def test_upstream_torchtitan_is_not_the_fork(monkeypatch):
    monkeypatch.delitem(sys.modules, "torchtitan", raising=False)
    check = doctor.check_fork()
    assert not check.ok and "torchtitan 0.3.0" in check.detail and "not the fork (upstream torchtitan)" in check.detail
    assert "git clone -b release-2.33 https://github.com/aws-neuron/torchtitan-neuron.git" in check.fix


def test_neuron_devices_from_neuron_ls(monkeypatch):
    """trn2.48xlarge: 16 devices x 8 physical cores = 128 = 64 ranks x LNC 2; neuron-ls sees 64 logical cores."""
    monkeypatch.setenv("PATH", f"{STAND_INS / 'bin'}{os.pathsep}{os.environ['PATH']}")
    check = doctor.check_devices(ScenarioRun(target="trn2"))
    assert check.ok and check.detail == ("16 devices x 8 physical cores = 128 (neuron-ls --json-output); neuron-ls "
                                         "counts 64 logical cores; 64 ranks x LNC 2 need 128")
    # trn2-cluster's 2 x 64 ranks: a node is checked for its own 64
    assert doctor.check_devices(ScenarioRun(target="trn2-cluster")).detail == check.detail
    monkeypatch.setenv("NEURON_LS_STAND_IN_DEVICES", "8")
    half = doctor.check_devices(ScenarioRun(target="trn2"))
    assert not half.ok and "8 devices x 8 physical cores = 64" in half.detail and "--nproc-per-node 32 or fewer" in half.fix
    assert doctor.check_devices(ScenarioRun(target="trn2", nproc=32, global_batch_size=32)).ok


def test_neuron_devices_from_dev_nodes(no_neuron_tools, tmp_path):
    """Without neuron-ls, the /dev/neuron<N> nodes: none here (fail), 16 on a node (pass)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    check = doctor.check_devices(ScenarioRun(target="trn2"), dev_dir=dev)
    assert not check.ok and check.detail.startswith("0 devices x 8 physical cores = 0")
    for n in range(16):
        (dev / f"neuron{n}").touch()
    assert doctor.check_devices(ScenarioRun(target="trn2"), dev_dir=dev).ok


def test_cuda_devices_against_the_ranks(monkeypatch):
    """The cuda target's 8 ranks (titan_cfg/targets.py) need 8 GPUs; this machine's torch is a CPU build."""
    import torch

    run = ScenarioRun(target="cuda")
    check = doctor.check_cuda(run)
    assert not check.ok and check.detail == (f"torch.cuda.is_available() is False: torch {torch.__version__} is a CPU "
                                             "build (torch.version.cuda is None); 8 ranks need 8 GPUs")
    assert check.fix == ("run on a machine with 8 GPUs and their driver, and install the CUDA build of torch "
                         "==2.13.0 (PyTorch's index for your CUDA)")  # profiles/cpu/constraints.txt, cuda's pins
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    four = doctor.check_cuda(run)
    assert not four.ok and four.detail == "4 CUDA devices (torch.cuda.device_count()); 8 ranks need 8"
    assert four.fix == "run on a machine with 8 GPUs, or pass --nproc-per-node 4 or fewer"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert doctor.check_cuda(run).ok
    assert "cuda devices" in [c.name for c in doctor.run_checks(run, None, with_weights=False)]
    assert "cuda devices" not in [c.name for c in doctor.run_checks(ScenarioRun(), None, with_weights=False)]


def test_lnc_of_the_ranks_the_shell_and_the_compiler_flags(monkeypatch):
    run = ScenarioRun(target="trn2")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    assert doctor.check_lnc(run).ok
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    shell = doctor.check_lnc(run)
    assert not shell.ok and "this shell sets 1, the ranks get 2" in shell.detail
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--target trn2 --lnc 1")
    flags = doctor.check_lnc(run)
    assert not flags.ok and "NEURON_CC_FLAGS compiles for LNC 1" in flags.detail  # neuronx-cc NCC_EVRF066
    monkeypatch.setenv("NEURON_CC_FLAGS", "--target trn2 --lnc=2")
    assert doctor.check_lnc(run).ok


def test_the_nki_kernel_importable():
    """trn2's rope=neuron needs torch-neuronx, nki and nkilib's kernel module; cpu's implementations need nothing."""
    (failed,) = doctor.check_kernels("trn2")
    assert (failed.name, failed.ok, failed.detail) == ("kernel rope=neuron", False, "torch_neuronx is not installed")
    with stand_ins("neuron"):
        (passed,) = doctor.check_kernels("trn2")
    assert passed.ok and passed.detail == "torch_neuronx, nki, nkilib.core.embeddings.rope_hf import"
    assert doctor.check_kernels("cpu") == []
    # a run checks the kernels it takes: moe on trn2 takes rope=neuron, native rope=reference (nothing to import)
    assert [c.name for c in doctor.check_kernels("trn2", ScenarioRun(scenario="moe", target="trn2").kernels_resolved)
            ] == ["kernel rope=neuron"]
    assert doctor.check_kernels("trn2", ScenarioRun(scenario="native", target="trn2").kernels_resolved) == []


def test_weights_complete_or_the_missing_piece_named(tiny_assets, tmp_path, monkeypatch):
    run = ScenarioRun()
    check, folder = doctor.check_weights(run, str(tiny_assets.weights_dir))
    assert check.ok and folder == tiny_assets.weights_dir
    shards = tmp_path / "no-shards"
    shutil.copytree(tiny_assets.weights_dir, shards, ignore=shutil.ignore_patterns("*.safetensors"))
    check, _ = doctor.check_weights(run, str(shards))
    assert not check.ok and "lacks tensors its config.json's model loads" in check.detail  # check_checkpoint's words
    assert check.fix.startswith(f"complete {shards} (the message says what it lacks)")  # the user's own: no id
    root = tmp_path / "weights-root"
    shutil.copytree(tiny_assets.weights_dir, root / "org" / "tiny")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(root))
    check, folder = doctor.check_weights(run, "org/tiny")
    assert check.ok and folder == root / "org" / "tiny"


def test_the_weights_fix_is_the_exact_download_into_the_folder_a_run_reads(tmp_path, monkeypatch):
    """A Hub id not here: with $TITANFLOW_WEIGHTS_ROOT unset the download goes to the Hugging Face cache (named),
    with it set to <root>/<id>; a config-only folder (the published config.json, tests/fixtures) is completed in
    place for the id it claims (_name_or_path), a folder claiming none for the scenario's published id."""
    from helpers import FIXTURES
    from huggingface_hub import constants

    run = ScenarioRun(scenario="hf_backend", target="trn2", init="pretrained")
    monkeypatch.delenv("TITANFLOW_WEIGHTS_ROOT", raising=False)
    check, folder = doctor.check_weights(run, "Qwen/Qwen3-4B-Instruct-2507")
    assert folder is None and check.detail == ("Qwen/Qwen3-4B-Instruct-2507: not on this machine ($TITANFLOW_WEIGHTS_ROOT "
                                               "unset, not in the Hugging Face cache)")
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 (into the Hugging Face cache {constants.HF_HUB_CACHE})"
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(tmp_path / "root"))
    check, _ = doctor.check_weights(run, "Qwen/Qwen3-4B-Instruct-2507")
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {tmp_path}/root/Qwen/Qwen3-4B-Instruct-2507"
    claimed = tmp_path / "instruct"
    shutil.copytree(FIXTURES / "qwen3-4b-instruct-2507", claimed)
    check, folder = doctor.check_weights(run, str(claimed))
    assert not check.ok and folder == claimed and "has no tokenizer.json" in check.detail
    assert check.fix == f"hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {claimed}"
    anonymous = tmp_path / "anonymous"
    anonymous.mkdir()
    config = json.loads((claimed / "config.json").read_text())
    del config["_name_or_path"]
    (anonymous / "config.json").write_text(json.dumps(config))
    check, _ = doctor.check_weights(run, str(anonymous))
    assert check.fix == (f"if {anonymous} is to hold Qwen/Qwen3-4B-Instruct-2507 (the weights hf_backend on trn2 is "
                         f"published with): hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir {anonymous}; else pass "
                         "--weights a complete Hugging Face folder")


def test_dataset_present_or_named(fork_importable, monkeypatch):
    assert doctor.check_dataset(ScenarioRun()).ok  # cpu: the committed Botchan text
    trn2 = doctor.check_dataset(ScenarioRun(target="trn2"))
    assert trn2.ok and trn2.detail.startswith(f"c4_test at {fork_importable / 'tests' / 'assets' / 'c4_test'}")


def test_dataset_missing_without_the_fork_checkout(monkeypatch):
    monkeypatch.delitem(sys.modules, "torchtitan", raising=False)
    monkeypatch.delenv("TITANFLOW_C4_TEST", raising=False)
    check = doctor.check_dataset(ScenarioRun(target="trn2"))
    assert not check.ok and check.detail.endswith(": missing") and "TITANFLOW_C4_TEST" in check.fix


def test_compile_cache_writable(tmp_path, monkeypatch):
    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    assert doctor.check_compile_cache().ok and (tmp_path / "cache" / "compile").is_dir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TITANFLOW_CACHE", str(blocker / "cache"))
    check = doctor.check_compile_cache()
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
    assert doctor.check_disk(run, tiny_assets.weights_dir).ok
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 1, 1))
    full = doctor.check_disk(run, tiny_assets.weights_dir)
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
    assert doctor.model_size(folder) == doctor.ModelSize(parameters, "estimated from config.json", False, "bfloat16",
                                                         2 * parameters)
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**39, 30 * 2**30))
    run = ScenarioRun(scenario="hf_backend", target="trn2", runs_dir=str(tmp_path / "runs"))
    check = doctor.check_disk(run, folder)
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
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**39, 2**39))
    assert doctor.check_disk(run, folder).ok  # 512 GiB free


def _doctor(*args: str, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """The real ``titanflow doctor`` in a Python of its own, with ``path`` first on its PYTHONPATH (stand-ins)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NEURON_LOGICAL_NC_CONFIG", "NEURON_CC_FLAGS")}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "titanflow.cli", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_doctor_cpu_passes_here():
    result = _doctor("--target", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "doctor cpu: 9 checks, 0 failed: ready"
    assert not [line for line in result.stdout.splitlines() if line.startswith("FAIL")]


def test_doctor_trn2_here_fails_one_line_per_missing_piece():
    """This machine has none of the trn2 stack: Python, torch, torch-neuronx, transformers, the fork, devices,
    the weights and c4_test each get their FAIL line with a fix; what is right passes; exit 1. Native on trn2 takes
    rope=reference, so no NKI kernel is checked (moe's is: test_a_trn2_run_is_refused_before_anything_runs)."""
    result = _doctor("--target", "trn2")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line.split(":")[0].removeprefix("FAIL").strip() for line in result.stdout.splitlines()
              if line.startswith("FAIL")]
    # upstream names: no torch_neuronx or nkilib here (torchtitan 0.3.0's names resolve)
    assert failed == ["python", "package torch", "package torch-neuronx", "package transformers", "upstream names",
                      "torchtitan fork", "neuron devices", "weights", "dataset"]
    assert all(" -> fix: " in line for line in result.stdout.splitlines() if line.startswith("FAIL"))
    assert result.stdout.splitlines()[-1] == "doctor trn2: 11 checks, 9 failed"


def _upstream_line(result: subprocess.CompletedProcess) -> tuple[str, float, float]:
    """The ``upstream names`` line of a doctor run, and the wall-clock and CPU seconds the line says it took."""
    (line,) = [line for line in result.stdout.splitlines() if line[6:].startswith("upstream names: ")]
    wall, cpu = re.search(r"in ([0-9.]+) s, ([0-9.]+) s of CPU\)", line).groups()
    return line, float(wall), float(cpu)


#: The name the stand-in fork of the failing case lacks: a private one torchtitan-neuron could well have dropped.
DROPPED = "torchtitan.models.qwen3._build_qwen3_layers"


def test_doctor_trn2_names_each_name_the_fork_lacks_with_its_module(tmp_path):
    """A fork (stand-in generated from titan_cfg.upstream's list) without one name titanflow takes: the check fails
    naming module and name, within 5 s of CPU (the seconds the line reports, from this run: a Python, torch, the
    stand-ins); the same fork with every name passes, torch_neuronx's and nkilib's (the neuron stand-ins) included."""
    neuron = STAND_INS / "neuron"
    lacking = _doctor("--target", "trn2", path=(generated_fork(tmp_path / "lacking", upstream.TORCHTITAN,
                                                               drop=(DROPPED,)), neuron))
    line, wall, cpu = _upstream_line(lacking)
    assert lacking.returncode == 1 and line.startswith(
        f"FAIL  upstream names: 1 missing of the {len(upstream.names_for('neuron'))} names titanflow takes: {DROPPED}: "
        "module torchtitan.models.qwen3 has no name _build_qwen3_layers (resolved after the trn2 target's "
        "compatibility layers, as its ranks would, in "), line
    assert "-> fix: make setup-trn2" in line
    assert cpu < 5, f"the check took {cpu} s of CPU ({wall} s on the clock)"
    full = _doctor("--target", "trn2", path=(generated_fork(tmp_path / "full", upstream.TORCHTITAN), neuron))
    line, wall, cpu = _upstream_line(full)
    assert line.startswith(f"ok    upstream names: all {len(upstream.names_for('neuron'))} names titanflow takes "
                           "from nkilib, torch, torch_neuronx, torchtitan resolve (in "), line
    assert cpu < 5, f"the check took {cpu} s of CPU ({wall} s on the clock)"
    assert "ok    torchtitan fork: torchtitan 0.2.2+neuron.1" in full.stdout  # doctor sees the generated fork as the fork


def test_a_generated_fork_lacks_a_whole_module_as_no_module(tmp_path):
    """The module form of the message: a fork without ``torchtitan.models.common.attention``."""
    fork = generated_fork(tmp_path / "fork", upstream.TORCHTITAN, drop=("torchtitan.models.common.attention",))
    probe = ("import json; from titan_cfg.upstream import missing, names_for; "
             "print(json.dumps(missing('neuron', tuple(n for n in names_for('neuron') if n.module.startswith('torchtitan')))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=doctor.paths.REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fork), str(doctor.paths.REPO_ROOT)])})
    assert json.loads(done.stdout) == {"torchtitan.models.common.attention": "no module"}


def test_doctor_checks_the_weights_of_the_scenario_asked_for(monkeypatch, capsys):
    """``--scenario moe`` on trn2 checks moe's weights as its deployments train them (Qwen3-30B-A3B, trimmed to 4
    layers, 64 experts, top-4: titan_cfg.scenarios.ON_NODE), not native's Qwen3-4B-Instruct-2507."""
    from titan_cfg.scenarios import WALKTHROUGH_TRIM

    checked = []
    real = doctor.run_checks
    monkeypatch.setattr(doctor, "check_upstream", lambda target: doctor.Check("upstream names", True, "not here"))
    monkeypatch.setattr(doctor, "run_checks", lambda run, weights, **kw: checked.append((run, weights)) or real(
        run, weights, **kw))
    monkeypatch.delenv("TITANFLOW_WEIGHTS_ROOT", raising=False)
    assert doctor.doctor("trn2", "moe") == 1
    (run, weights), = checked
    assert (run.scenario, weights, run.trim.model_dump()) == ("moe", "Qwen/Qwen3-30B-A3B", WALKTHROUGH_TRIM)
    weights_line = next(line for line in capsys.readouterr().out.splitlines() if line[6:].startswith("weights: "))
    assert weights_line.startswith("FAIL  weights: Qwen/Qwen3-30B-A3B: not on this machine")
    checked.clear()
    assert doctor.doctor("trn2", "native") == 1
    assert [(run.scenario, weights, run.trim) for run, weights in checked] == [
        ("native", "Qwen/Qwen3-4B-Instruct-2507", None)]


def test_doctor_bad_input_exits_2():
    result = _doctor("--target", "tpu")
    assert result.returncode == 2 and "target: unknown 'tpu'; fix: pass one of cpu, trn2, cuda" in result.stderr


#: The field --nproc-per-node sets (ScenarioRun's ranks field), as describe names it; its fix names doctor's own flag.
RANKS = "nproc_per_node"


@pytest.mark.parametrize(("args", "line"), [
    (("--nproc-per-node", "-3"), f"{RANKS}: Input should be greater than or equal to 1, given -3; fix: pass 1 or more for "
                        f"--{RANKS.replace('_', '-')}"),
    (("--nproc", "abc"), f"{RANKS}: Input should be a valid integer, unable to parse string as an integer, given abc; "
                         f"fix: pass a whole number for --{RANKS.replace('_', '-')}"),
    (("--init", "warm"), "init: Input should be 'random' or 'pretrained', given warm; fix: pass 'random' or "
                         "'pretrained' for --init"),
])
def test_doctor_bad_numbers_are_told_as_titanflow_run_tells_them(capsys, args, line):
    """Field, what is wrong, the fix (titanflow.refusal.describe), not pydantic's own dump."""
    from titanflow.cli import main

    assert main(["doctor", *args]) == 2
    assert capsys.readouterr().err == f"titanflow: bad input:\n{line}\n"


def test_a_trn2_run_is_refused_before_anything_runs(tmp_path):
    """titanflow.run.preflight runs the doctor's checks (less the weights) for trn2 launches only."""
    from titanflow.run.preflight import preflight

    with pytest.raises(ValueError) as refused:
        preflight(ScenarioRun(scenario="moe", target="trn2", runs_dir=str(tmp_path)))  # moe takes rope=neuron
    message = str(refused.value)
    assert message.startswith("target: trn2 is not ready on this machine (`titanflow doctor --target trn2`")
    assert "FAIL  kernel rope=neuron: torch_neuronx is not installed" in message and "FAIL  weights" not in message
    assert preflight(ScenarioRun(target="trn2", runs_dir=str(tmp_path)), launch=False).parent == tmp_path


def test_a_run_on_trn2_is_refused_for_a_missing_upstream_name_only_once_everything_else_holds(monkeypatch):
    """require_ready (a trn2 run's preflight) resolves the upstream names (seconds, a Python of their own) only when
    every other check passed, so a machine that is no trn2 node is refused at once; then a missing name refuses it."""
    calls = []
    failing = doctor.Check("upstream names", False, "lacks torchtitan.models.qwen3._qwen3_norm (gone)", "adapt it")
    monkeypatch.setattr(doctor, "check_upstream", lambda target: calls.append(target) or failing)
    run = ScenarioRun(scenario="native", target="trn2")
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **k: [doctor.Check("python", False, "3.11", "use 3.12")])
    with pytest.raises(ValueError, match="python"):
        doctor.require_ready(run)
    assert calls == []
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **k: [doctor.Check("python", True, "3.12", "")])
    with pytest.raises(ValueError, match=r"upstream names: lacks torchtitan.models.qwen3._qwen3_norm"):
        doctor.require_ready(run)
    assert calls == ["trn2"]
