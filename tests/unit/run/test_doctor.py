"""``titanflow doctor`` (titanflow/run/doctor.py): the command run as a user runs it, with stand-ins of what this
machine lacks (tests/stand_ins/: the torchtitan fork, torch-neuronx, nkilib) first on its PYTHONPATH: its lines, its
summary and its exit codes. Each check on its own: tests/unit/run/test_checks.py."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.stand_ins import STAND_INS, every_name, generated_fork

from titan_cfg import upstream
from titanflow.paths import REPO_ROOT
from titanflow.run import checks, doctor


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
    assert result.stdout.splitlines()[-1] == "doctor cpu: 10 checks, 0 failed: ready"
    assert not [line for line in result.stdout.splitlines() if line.startswith("FAIL")]


def test_doctor_trn2_here_fails_one_line_per_missing_piece():
    """This machine has none of the trn2 stack: Python, torch, torch-neuronx, transformers, the fork, devices,
    the weights and c4_test each get their FAIL line with a fix, and the disk, sized from the weights, says it was
    not checked; what is right passes; exit 1. Native on trn2 takes
    rope=reference, so no NKI kernel is checked (moe's is: test_a_trn2_run_is_refused_before_anything_runs)."""
    result = _doctor("--target", "trn2")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line.split(":")[0].removeprefix("FAIL").strip() for line in result.stdout.splitlines()
              if line.startswith("FAIL")]
    # upstream names: no torch_neuronx or nkilib here (torchtitan 0.3.0's names resolve)
    assert failed == ["python", "package torch", "package torch-neuronx", "package transformers", "upstream names",
                      "torchtitan fork", "neuron devices", "weights", "dataset", "disk"]
    assert all(" -> fix: " in line for line in result.stdout.splitlines() if line.startswith("FAIL"))
    assert result.stdout.splitlines()[-1] == "doctor trn2: 13 checks, 10 failed"


def _upstream_line(result: subprocess.CompletedProcess) -> tuple[str, float, float]:
    """The ``upstream names`` line of a doctor run, and the wall-clock and CPU seconds the line says it took."""
    (line,) = [line for line in result.stdout.splitlines() if line[6:].startswith("upstream names: ")]
    wall, cpu = re.search(r"in ([0-9.]+) s, ([0-9.]+) s of CPU\)", line).groups()
    return line, float(wall), float(cpu)


#: The name the stand-in fork of the failing case lacks: a private one torchtitan-neuron could well have dropped.
DROPPED = "torchtitan.models.qwen3._build_qwen3_layers"


def test_doctor_trn2_names_each_name_the_fork_lacks_with_its_module(tmp_path):
    """A fork (stand-in generated from titan_cfg.upstream's list and titan_cfg.window's probes) without one name native
    takes: the check fails naming module and name, within 5 s of CPU (the seconds the line reports, from this run: a
    Python, torch, the stand-ins)."""
    neuron = STAND_INS / "neuron"
    lacking = _doctor("--target", "trn2", "--scenario", "native",
                      path=(generated_fork(tmp_path / "lacking", every_name(), drop=(DROPPED,)), neuron))
    line, wall, cpu = _upstream_line(lacking)
    assert lacking.returncode == 1 and line.startswith(
        f"FAIL  upstream names: 1 missing of the {len(upstream.names_for('neuron', 'native'))} names native takes: "
        f"{DROPPED}: module torchtitan.models.qwen3 has no name _build_qwen3_layers; "), line
    assert "; resolved after the trn2 target's compatibility layers, as its ranks would, in " in line
    assert "-> fix: make setup-trn2" in line
    assert cpu < 5, f"the check took {cpu} s of CPU ({wall} s on the clock)"


#: What the fork of the passing case lacks: an attribute only hf_backend takes, and the chunked loss wrapper (upstream
#: from 2026-06-26, #3779), whose older form, the plain chunked loss, titan_cfg.forms takes.
HF_BACKEND_ONLY = "torchtitan.experiments.transformers_modeling_backend.model.create_attention_mask"
LOSS_WRAPPER = "torchtitan.components.loss.ChunkedLossWrapper"


def test_doctor_finds_the_fork_under_its_own_name_and_checks_only_what_the_scenario_takes(tmp_path):
    """A fork installed as ``torchtitan-neuron`` that lacks an hf_backend-only attribute and the chunked loss wrapper:
    ``--scenario native`` passes the upstream check, names the distribution and version, where the fork sits in the
    window and the loss
    wrapper's older form with its upstream date; the fork check finds it under that name."""
    fork = generated_fork(tmp_path / "fork", every_name(), drop=(HF_BACKEND_ONLY, LOSS_WRAPPER),
                          distribution="torchtitan-neuron")
    result = _doctor("--target", "trn2", "--scenario", "native", path=(fork, STAND_INS / "neuron"))
    line, wall, cpu = _upstream_line(result)
    assert line.startswith(f"ok    upstream names: all {len(upstream.names_for('neuron', 'native'))} names native "
                           "takes from nkilib, torch, torch_neuronx, torchtitan resolve (torchtitan-neuron "
                           "0.2.2+neuron.1 resembles upstream between "), line
    # it has later changes than some it lacks (the loss wrapper, and those its placeholders cannot answer): out of
    # upstream's order, as a patched base is
    assert "out of upstream's order (a patched base)" in line
    assert "titanflow adapts to it: " in line and "without chunked_loss_wrapper (2026-06-26, #3779)" in line
    assert cpu < 5, f"the check took {cpu} s of CPU ({wall} s on the clock)"
    assert "ok    torchtitan fork: torchtitan-neuron 0.2.2+neuron.1" in result.stdout


def test_a_generated_fork_lacks_a_whole_module_as_no_module(tmp_path):
    """The module form of the message: a fork without ``torchtitan.models.common.attention``."""
    fork = generated_fork(tmp_path / "fork", upstream.TORCHTITAN, drop=("torchtitan.models.common.attention",))
    probe = ("import json; from titan_cfg.upstream import missing, names_for; "
             "print(json.dumps(missing('neuron', tuple(n for n in names_for('neuron') if n.module.startswith('torchtitan')))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fork), str(REPO_ROOT)])})
    assert json.loads(done.stdout) == {"torchtitan.models.common.attention": "no module"}


def test_doctor_checks_the_weights_of_the_scenario_asked_for(monkeypatch, capsys):
    """``--scenario moe`` on trn2 checks moe's weights as its deployments train them (Qwen3-30B-A3B, trimmed to 4
    layers, 64 experts, top-4: titan_cfg.scenarios.ON_NODE), not native's Qwen3-4B-Instruct-2507."""
    from titan_cfg.scenarios import WALKTHROUGH_TRIM

    checked = []
    real = doctor.run_checks
    monkeypatch.setattr(checks, "upstream_checks", lambda target, scenario, job: [checks.Check("upstream names",
                                                                                              True, "not here")])
    monkeypatch.setattr(doctor, "run_checks", lambda run, weights, **kw: checked.append((run, weights)) or real(
        run, weights, **kw))
    monkeypatch.delenv("TITANFLOW_WEIGHTS_ROOT", raising=False)
    assert doctor.doctor("trn2", "moe") == 1
    (run, weights), = checked
    assert (run.scenario, weights, run.trim.model_dump()) == ("moe", "Qwen/Qwen3-30B-A3B", WALKTHROUGH_TRIM)
    printed = capsys.readouterr().out.splitlines()
    weights_line = next(line for line in printed if line[6:].startswith("weights: "))
    assert weights_line.startswith("FAIL  weights: Qwen/Qwen3-30B-A3B: not on this machine")
    # the disk is sized from the weights' config.json: without it the line says it was not checked, and why
    assert [line for line in printed if line[6:].startswith("disk: ")] == [
        "FAIL  disk: not checked: what the run writes is sized from its weights' config.json, which is not on this "
        "machine -> fix: the weights' fix above, then titanflow doctor again"]
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
