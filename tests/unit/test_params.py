"""Bad input fails before any compute, naming the field (issue: bad input)."""

import json
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from titan_cfg.scenarios import SCENARIOS
from titanflow.cli import main
from titanflow.params import ScenarioRun


@pytest.mark.fault
@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"scenario": "mystery"}, "scenario"),
        ({"target": "tpu"}, "target"),
        ({"steps": 0}, "steps"),
        ({"nproc": 3}, "nproc"),  # 3 ranks do not divide the cpu target's global batch of 4
        ({"global_batch_size": 5, "nproc": 2}, "nproc"),
        ({"weights": "/no/such/folder"}, "weights"),
        ({"run_id": "../escape"}, "run_id"),
        ({"lr": float("inf")}, "lr"),  # torchtitan would refuse it only after the flow started
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"weights": "~/no-such-titanflow-folder"}, "weights"),
        ({"steps": 10**9}, "steps"),  # at 0.05 s a step at best, far beyond the 1800 s timeout
        ({"timeout_s": 8 * 24 * 3600.0}, "timeout_s"),  # more than a week
        ({"target": "trn2", "nproc": 128, "global_batch_size": 128}, "nproc"),  # trn2.48xlarge: 64 ranks
    ],
)
def test_bad_field_is_named(fields, named):
    with pytest.raises(ValidationError) as err:
        ScenarioRun(**fields)
    assert named in str(err.value)


def test_defaults_resolve_from_the_target():
    run = ScenarioRun()
    assert (run.world_size, run.global_batch_size_resolved, run.seq_len_resolved) == (2, 4, 256)
    trn2 = ScenarioRun(target="trn2")
    assert (trn2.world_size, trn2.global_batch_size_resolved) == (64, 64)


def test_a_file_given_as_weights_is_refused_before_anything_runs_naming_the_fix(tmp_path, monkeypatch, capsys):
    # a name like a Hub id went to the Hub before (pull_weights, a flow run started, 9 s offline)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("not a model")
    for given in ("README.md", str(tmp_path / "README.md")):
        with pytest.raises(ValidationError) as err:
            ScenarioRun(weights=given)
        assert f"weights: {given} is a file; fix: give the model's folder (the one holding its config.json)" in \
            str(err.value)
    assert main(["run", "native", "--target", "cpu", "--weights", "README.md"]) == 2
    assert "weights: README.md is a file" in capsys.readouterr().err


def test_cli_refuses_bad_input_in_seconds_without_prefect(capsys):
    start = time.monotonic()
    assert main(["run", "native", "--target", "cpu", "--steps", "0"]) == 2
    assert time.monotonic() - start < 5  # no server started, nothing trained
    assert "steps" in capsys.readouterr().err


def test_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ValidationError, match="warmup_steps"):
        ScenarioRun(steps=3, warmup_steps=5)
    assert ScenarioRun(steps=1).warmup_steps_resolved == 1


def _llama_folder(tmp_path, tiny_assets):
    import json
    import shutil

    folder = tmp_path / "llama"
    shutil.copytree(tiny_assets.weights_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    return folder


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--seq-len", "100000"], "seq_len: 100000 exceeds the model's max_position_embeddings 4096"),
        (["--target", "trn2"], "titanflow render native --target trn2"),
        (["--runs-dir", "/proc/titanflow-runs"], "runs_dir"),
    ],
)
def test_cli_preflight_refuses_before_prefect_and_writes_nothing(tmp_path, capsys, tiny_assets, options, message):
    runs = tmp_path / "runs"
    args = ["run", "native", "--target", "cpu", "--runs-dir", str(runs), *options]
    if "--runs-dir" in options:
        args = ["run", "native", *options]
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < 5
    assert message in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


def test_cli_refuses_a_non_qwen3_folder_and_an_existing_run_id(tmp_path, capsys, tiny_assets):
    runs = tmp_path / "runs"
    assert main(["run", "native", "--weights", str(_llama_folder(tmp_path, tiny_assets)),
                 "--runs-dir", str(runs)]) == 2
    assert "model_type is 'llama'" in capsys.readouterr().err
    (runs / "taken").mkdir(parents=True)
    assert main(["run", "native", "--run-id", "taken", "--runs-dir", str(runs)]) == 2
    assert "run_id" in capsys.readouterr().err and list(runs.iterdir()) == [runs / "taken"]


def _vocab_folder(tmp_path, tiny_assets, vocab_size: int):
    import json
    import shutil

    folder = tmp_path / f"vocab-{vocab_size}"
    shutil.copytree(tiny_assets.weights_dir, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": vocab_size}))
    return folder


def test_a_config_vocab_size_below_the_tokenizers_ids_is_refused_before_a_launch(tmp_path, capsys, tiny_assets):
    """The Qwen3 tokenizer's ids run to 151,668 (151,643 BPE ranks and 26 added tokens, titanflow.assets); a
    config.json with fewer embedding rows failed each rank's first forward pass (IndexError) after the launch."""
    from titanflow.assets.tokenizer import QWEN3_ADDED_TOKENS, QWEN_RANKS_COUNT
    from titanflow.weights.fit import check_tokenizer_fits

    assert QWEN_RANKS_COUNT + len(QWEN3_ADDED_TOKENS) - 1 == 151_668  # the largest id the message names
    runs = tmp_path / "runs"
    assert main(["run", "native", "--weights", str(_vocab_folder(tmp_path, tiny_assets, 151_000)),
                 "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "weights: " in err and "has vocab_size 151000, but its tokenizer.json has ids up to 151668" in err
    assert "vocab_size is at least 151669" in err and (not runs.exists() or not any(runs.iterdir()))
    check_tokenizer_fits(_vocab_folder(tmp_path, tiny_assets, 151_669), 151_669)  # one row per id: enough
    with pytest.raises(ValueError, match="ids up to 151668"):
        check_tokenizer_fits(_vocab_folder(tmp_path, tiny_assets, 151_668), 151_668)
    # the largest id is kept under the file's content hash: a tokenizer without its last added token is read anew
    shrunk = _vocab_folder(tmp_path / "shrunk", tiny_assets, 151_668)
    tokenizer = json.loads((shrunk / "tokenizer.json").read_text())
    assert tokenizer["added_tokens"].pop()["id"] == 151_668
    (shrunk / "tokenizer.json").write_text(json.dumps(tokenizer))
    check_tokenizer_fits(shrunk, 151_668)  # ids up to 151667 now: 151,668 rows hold them
    with pytest.raises(ValueError, match="ids up to 151667"):
        check_tokenizer_fits(shrunk, 151_667)


def test_weights_pointing_at_a_file_is_refused(tmp_path, capsys, tiny_assets):
    assert main(["run", "native", "--weights", str(tiny_assets.weights_dir / "config.json"),
                 "--runs-dir", str(tmp_path)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_cli_names_an_unreachable_prefect_api(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing listens on port 9
    assert main(["run", "native", "--runs-dir", str(tmp_path)]) == 2
    assert "PREFECT_API_URL=http://127.0.0.1:9/api does not answer" in capsys.readouterr().err


def test_pretrained_from_a_folder_without_weights_is_refused_before_training(tmp_path, capsys, tiny_assets):
    import shutil

    folder = tmp_path / "no-weights"
    shutil.copytree(tiny_assets.weights_dir, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    assert main(["run", "native", "--init", "pretrained", "--weights", str(folder),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "holds no *.safetensors; nothing to load for init=pretrained" in capsys.readouterr().err


def test_pretrained_load_needs_an_absolute_folder(tmp_path):
    from titan_cfg.trainer_config import check_pretrained_source

    with pytest.raises(ValueError, match="relative"):
        check_pretrained_source(Path("models/qwen3"))


def test_a_weights_folder_under_home_is_found_with_a_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "tinyw").mkdir()
    assert ScenarioRun(weights="~/tinyw").weights == "~/tinyw"


@pytest.mark.fault
def test_steps_are_bounded_by_the_timeout_at_the_fastest_step_the_target_can_do():
    from titan_cfg.targets import TARGETS

    fastest = TARGETS["cpu"]().min_step_s
    most = int(1800 / fastest)  # the default timeout_s
    assert ScenarioRun(steps=most).steps == most
    with pytest.raises(ValidationError, match=rf"steps: {most + 1} steps take at least 1,800.05 s .*beyond timeout_s "
                                              rf"1,800; fix: pass at most {most} steps or a longer --timeout-s"):
        ScenarioRun(steps=most + 1)
    assert ScenarioRun(steps=most + 1, timeout_s=3600).steps == most + 1
    from titanflow.params import MAX_TIMEOUT_S

    longest = int(MAX_TIMEOUT_S / fastest)  # at the longest timeout the fix is fewer steps alone
    with pytest.raises(ValidationError, match=rf"fix: pass at most {longest} steps \(--timeout-s {MAX_TIMEOUT_S} is the "
                                              r"longest\)"):
        ScenarioRun(steps=longest + 1, timeout_s=MAX_TIMEOUT_S)


def test_bad_values_are_told_with_the_field_what_is_wrong_and_the_fix(tmp_path, capsys):
    """titanflow.refusal.describe: one line per field, the value given and what to pass (pydantic's
    own text without its links and input dumps)."""
    assert main(["run", "native", "--steps", "abc", "--lr", "0", "--compile", "maybe",
                 "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "titanflow: bad input:\n"
        "steps: Input should be a valid integer, unable to parse string as an integer, given abc; fix: pass a whole "
        "number for --steps\n"
        "lr: Input should be greater than 0, given 0; fix: pass more than 0 for --lr\n"
        "compile: Input should be a valid boolean, unable to interpret input, given maybe; fix: pass true or false "
        "for --compile\n")
    assert main(["render", "moe", "--trim", "layers=0,experts=4,top_k=1", "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("titanflow: bad input:\ntrim.layers: Input should be greater than or equal "
                                       "to 1, given 0; fix: pass 1 or more for --trim layers=\n")


@pytest.mark.parametrize(("target", "usual"), [("trn2", " (the trn2 deployments': --weights "
                                                        "Qwen/Qwen3-4B-Instruct-2507)"), ("cuda", "")])
def test_pretrained_off_cpu_names_its_weights_before_anything_is_built(tmp_path, capsys, target, usual):
    """Without --weights, init pretrained would pretrain the embedded tiny checkpoint on this CPU first (minutes of
    compute in a command that only renders) and train no model of the target: refused for run and render alike,
    with the weights the target's deployments pass (titan_cfg.scenarios.ON_NODE)."""
    for command in ("render", "run"):
        assert main([command, "native", "--target", target, "--init", "pretrained",
                     "--runs-dir", str(tmp_path / "runs")]) == 2
        assert capsys.readouterr().err == (
            f"titanflow: bad input:\nweights: none given for init pretrained on {target}; the embedded tiny model's "
            "pretrained checkpoint would be pretrained on this machine's CPU first and is no model of the target; "
            f"fix: pass --weights a Hugging Face folder or Hub id{usual}\n")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize(("trim", "message"), [
    ("layers=5,experts=4,top_k=1", "trim: layers 5 > 4 (the checkpoint's); trimming only removes; fix: pass at most "
                                   "layers=4,experts=8,top_k=2"),  # the embedded tiny MoE: 4 layers, 8 experts, top-2
    ("layers=2,experts=16,top_k=3", "trim: experts 16 > 8, top_k 3 > 2 (the checkpoint's)"),
    ("layers=2,experts=4,top_k=5", "trim: top_k 5 exceeds experts 4; fix: route to at most the experts kept (top_k=4 or less)"),
])
def test_a_trim_is_checked_against_the_models_config_before_the_flow_starts(tmp_path, capsys, monkeypatch, trim,
                                                                           message):
    """The embedded tiny MoE's config is checked from its spec: nothing is built (the cache folder is not made)."""
    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    assert main(["render", "moe", "--trim", trim, "--runs-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_trim_of_a_hub_id_is_checked_where_its_copy_is_local(tmp_path, monkeypatch):
    """Qwen3-30B-A3B (48 layers, 128 experts, top-8; its published config.json in tests/fixtures) under
    $TITANFLOW_WEIGHTS_ROOT: a trim beyond it is refused by preflight, a Hub id with no local copy is left to
    the flow's trim step (after the download)."""
    import shutil

    from helpers import FIXTURES

    from titanflow.run.model_config import check_trim_fits

    shutil.copytree(FIXTURES / "qwen3-30b-a3b", tmp_path / "Qwen" / "Qwen3-30B-A3B")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(tmp_path))
    run = ScenarioRun(scenario="moe", target="trn2", weights="Qwen/Qwen3-30B-A3B", trim="layers=49,experts=64,top_k=4")
    with pytest.raises(ValueError, match=r"^trim: layers 49 > 48 \(the checkpoint's\); trimming only removes; fix: pass "
                                         "at most layers=48,experts=128,top_k=8$"):
        check_trim_fits(run)
    check_trim_fits(ScenarioRun(scenario="moe", target="trn2", weights="Qwen/Qwen3-30B-A3B",
                                trim="layers=4,experts=64,top_k=4"))  # the walkthrough's
    check_trim_fits(ScenarioRun(scenario="moe", target="trn2", weights="Qwen/Qwen3-0B-None",
                                trim="layers=49,experts=64,top_k=4"))  # not here: checked after the download


def test_a_hub_ids_copy_on_this_machine_is_checked_before_the_download(tmp_path, monkeypatch, capsys, tiny_assets):
    """A Hub id whose copy is under $TITANFLOW_WEIGHTS_ROOT: its config.json is checked by preflight (the tiny model's
    max_position_embeddings 4096 refuses --seq-len 8192), not after pull_weights; with no copy anywhere and the Hub
    offline (tests/conftest.py), the download pull_weights would need is refused, with the command that makes the
    copy. Neither writes a run folder."""
    import shutil

    shutil.copytree(tiny_assets.weights_dir, tmp_path / "root" / "org" / "tiny")
    monkeypatch.setenv("TITANFLOW_WEIGHTS_ROOT", str(tmp_path / "root"))
    runs = tmp_path / "runs"
    assert main(["run", "native", "--weights", "org/tiny", "--seq-len", "8192", "--runs-dir", str(runs)]) == 2
    assert capsys.readouterr().err == ("titanflow: bad input:\nseq_len: 8192 exceeds the model's max_position_embeddings "
                                       "4096; fix: pass --seq-len 4096 or less\n")
    assert main(["run", "native", "--weights", "org/absent", "--runs-dir", str(runs)]) == 2
    assert capsys.readouterr().err == (
        "titanflow: bad input:\nweights: org/absent is not on this machine (not under $TITANFLOW_WEIGHTS_ROOT, not in the "
        "Hugging Face cache) and HF_HUB_OFFLINE forbids downloading it; fix: hf download org/absent --local-dir "
        f"{tmp_path / 'root' / 'org' / 'absent'} where there is network, or unset HF_HUB_OFFLINE\n")
    assert not runs.exists() or not any(runs.iterdir())


def test_a_cuda_run_needs_a_gpu_per_rank_before_anything_runs(tmp_path, capsys):
    import torch

    assert main(["run", "native", "--target", "cuda", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"titanflow: bad input:\ntarget: cuda cannot run on this machine: torch.cuda.is_available() "
                          f"is False: torch {torch.__version__} is a CPU build (torch.version.cuda is None); 8 ranks "
                          "need 8 GPUs; fix: run on a machine with 8 GPUs")


@pytest.mark.parametrize(("fields", "message"), [
    ({"kernels": "rope=cpu,rope=reference"},
     "kernels: rope given more than once in 'rope=cpu,rope=reference'; fix: give each once: op=impl"),
    ({"kernels": "rope=cpu, attention=sdpa ,rope=cpu"}, "kernels: rope given more than once"),
    ({"scenario": "moe", "trim": "layers=1,experts=2,layers=2,top_k=1"},
     "trim: layers given more than once in 'layers=1,experts=2,layers=2,top_k=1'; fix: give each once: layers=N"),
])
def test_a_key_given_twice_in_a_key_value_list_is_refused_not_overwritten(fields, message):
    """Both command-line mappings (--kernels, --trim) would otherwise keep the last value given, silently."""
    with pytest.raises(ValidationError, match=message):
        ScenarioRun(**fields)
    assert ScenarioRun(kernels="rope=cpu, attention=sdpa").kernels == {"rope": "cpu", "attention": "sdpa"}


def test_the_mappings_also_take_a_json_object_as_their_help_says():
    assert ScenarioRun(kernels='{"rope": "reference"}').kernels == {"rope": "reference"}
    trim = ScenarioRun(scenario="moe", trim='{"layers": 1, "experts": 4, "top_k": 1}').trim
    assert (trim.layers, trim.experts, trim.top_k) == (1, 4, 1)
    with pytest.raises(ValidationError, match="kernels: rope given more than once"):
        ScenarioRun(kernels='{"rope": "cpu", "rope": "reference"}')
    with pytest.raises(ValidationError, match="kernels: .* is not a JSON object"):
        ScenarioRun(kernels='{"rope": cpu}')


def test_a_trim_of_a_dense_scenario_is_refused_for_the_scenario_whatever_its_keys(capsys):
    """The scenario is what is wrong: a trim missing keys is not asked to complete them first."""
    for scenario in ("native", "hf_backend"):
        with pytest.raises(ValidationError, match=f"trim: only MoE weights are trimmed; {scenario} trains a dense"):
            ScenarioRun(scenario=scenario, trim="layers=1")
    assert main(["render", "native", "--trim", "layers=1"]) == 2
    err = capsys.readouterr().err
    assert "trim: only MoE weights are trimmed; native trains a dense model; fix: run the moe scenario, or drop --trim" in err
    assert "experts" not in err  # not asked for the trim keys it lacks


def test_every_run_option_says_what_it_is_in_its_help():
    """`titanflow run --help` is made from ScenarioRun's fields (titanflow.cli._add_run_options): each has a
    description, and a default that is the target's names every target's figure."""
    from titan_cfg.targets import TARGETS

    undescribed = [name for name, field in ScenarioRun.model_fields.items() if name != "tolerances" and not field.description]
    assert undescribed == []
    for field in ("global_batch_size", "seq_len", "nnodes", "nproc_per_node", "checkpoint_interval"):
        described = ScenarioRun.model_fields[field].description
        assert all(f"{name} {getattr(target(), field)}" in described for name, target in TARGETS.items()), field
    assert "trn2-cluster 2" in ScenarioRun.model_fields["nnodes"].description  # the one target of two nodes
    kernels_help = ScenarioRun.model_fields["kernels"].description
    assert all(f"{name} {','.join(f'{op}={impl}' for op, impl in target().kernels.items())}" in kernels_help
               for name, target in TARGETS.items())
    # where a scenario's own value replaces the target's (titan_cfg/scenarios.py): named with its node type
    from titan_cfg.scenarios import ON_NODE

    seq_len_help = ScenarioRun.model_fields["seq_len"].description
    assert all(f"{name} on {node}: {row.seq_len}" in seq_len_help for (name, node), row in ON_NODE.items() if row.seq_len)
    assert "hf_backend on trn2: 2048" in seq_len_help  # walkthrough scenario 1's workload
    assert "hf_backend on cpu: at most 1 rank(s)" in ScenarioRun.model_fields["nproc_per_node"].description
    assert all(f"{name} on {node}: {','.join(f'{op}={impl}' for op, impl in row.kernels.items())}" in kernels_help
               for (name, node), row in ON_NODE.items() if row.kernels)


def test_the_top_level_help_lists_every_command_in_plain_text(capsys):
    """`titanflow --help` shows the module docstring's table of commands, one line at least for each subcommand,
    without the docstring's markup."""
    import argparse

    from titanflow.cli import build_parser

    (commands,) = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    with pytest.raises(SystemExit):
        main(["--help"])
    printed = capsys.readouterr().out
    assert "``" not in printed
    assert [name for name in commands if f"\n    titanflow {name} " not in printed] == []


def test_the_walkthrough_given_as_a_scenario_is_pointed_to_its_mode():
    """``titanflow run walkthrough``: no such scenario, and the fix says the walkthrough is the mode of every one."""
    with pytest.raises(ValueError, match=rf"unknown 'walkthrough'; fix: pass one of {', '.join(SCENARIOS)} \(the "
                                         r"walkthrough's settings are a mode of every scenario: --model-spec walkthrough\)"):
        ScenarioRun(scenario="walkthrough")


def test_every_error_of_one_input_comes_at_once_a_field_error_beside_the_checks_across_fields():
    """--steps 0 fails the field itself, so the checks across fields never ran: they run again on the rest, and those
    that speak of steps (checkpoint_interval against steps' default 10) are left out. The cpu target's world size is
    2 (titan_cfg.targets.cpu), so 3 sequences is a batch of its own fault, 2 or 4 the multiples beside it."""
    from titanflow.refusal import describe

    with pytest.raises(ValidationError) as caught:
        ScenarioRun(steps=0, global_batch_size=3, checkpoint_interval=20, weights="/no/such/folder")
    lines = describe(caught.value).splitlines()
    assert [line.split(":")[0] for line in lines] == ["steps", "global_batch_size", "weights"], lines
    assert "e.g. --global-batch-size 2 or 4" in lines[1]


def test_every_check_across_fields_that_fails_is_named_not_only_the_first():
    from titanflow.refusal import describe

    with pytest.raises(ValidationError) as caught:
        ScenarioRun(steps=5, checkpoint_interval=6, warmup_steps=7, global_batch_size=3)
    assert [line.split(":")[0] for line in describe(caught.value).splitlines()] == [
        "global_batch_size", "checkpoint_interval", "warmup_steps"]
