"""Every refusal of bad input reads the same way, whatever check finds it: ``titanflow: bad input:``, then one line
per field that starts with the field's name and says ``fix:`` and what to pass, exit code 2, and nothing written (no
run folder, and no embedded model built: the cache folder is not even made).

The inputs are one of each kind a user gives wrongly on the command line (pydantic's bounds, the run's own checks,
the kernel registry, trim, weights folders, resume, the targets' ranks and memory); the field each must name is
the option the input gave."""

from __future__ import annotations

import re

import pytest

from titanflow.cli import main

#: (arguments after the command, the field the refusal must name)
RUN_INPUTS = [
    (["native", "--global-batch-size", "0"], "global_batch_size"),
    (["native", "--global-batch-size", "3"], "global_batch_size"),
    (["native", "--global-batch-size", "1000000"], "global_batch_size"),
    (["native", "--seq-len", "100"], "seq_len"),
    (["native", "--seq-len", "100000"], "seq_len"),
    (["native", "--steps", "0"], "steps"),
    (["native", "--steps", "100000000"], "steps"),
    (["native", "--lr", "nan"], "lr"),
    (["native", "--seed", str(2**64)], "seed"),  # beyond torch.manual_seed's range: every rank would raise
    (["native", "--compile", "maybe"], "compile"),
    (["native", "--nproc-per-node", "64"], "nproc_per_node"),
    (["native", "--checkpoint-interval", "50"], "checkpoint_interval"),
    (["native", "--warmup-steps", "50"], "warmup_steps"),
    (["nosuch"], "scenario"),
    (["native", "--target", "tpu"], "target"),
    (["native", "--kernels", "foo"], "kernels"),
    (["native", "--kernels", "rope=magic"], "kernels"),
    (["native", "--kernels", "warp=cpu"], "kernels"),
    (["native", "--kernels", "rope=neuron"], "kernels"),
    (["native", "--kernels", "rope=cpu,rope=reference"], "kernels"),
    (["hf_backend", "--kernels", "rope=cpu"], "kernels"),
    (["native", "--trim", "layers=1,experts=1,top_k=1"], "trim"),
    (["moe", "--trim", "foo"], "trim"),
    (["moe", "--trim", "depth=2"], "trim.layers"),
    (["moe", "--trim", "layers=99,experts=2,top_k=1"], "trim"),
    (["moe", "--trim", "layers=2,experts=2,top_k=3"], "trim"),
    (["moe", "--model-spec", "fork"], "model_spec"),
    (["native", "--weights", "{missing}"], "weights"),
    (["native", "--weights", "{file}"], "weights"),
    (["native", "--weights", "{empty}"], "weights"),
    (["native", "--target", "trn2", "--init", "pretrained"], "weights"),
    (["native", "--weights", "nosuch-org/nosuch-model"], "weights"),  # offline, in no cache
    (["native", "--weights", ""], "weights"),  # else the working directory
    (["native", "--weights", "\u30e2\u30c7\u30eb/\u00fc"], "weights"),  # neither a folder nor an ASCII Hub id
    (["native", "--weights", "/" + "a" * 6000], "weights"),  # a name too long to look up: no OSError
    (["native", "--run-id", "a/b"], "run_id"),
    (["native", "--run-id", "a" * 300], "run_id"),  # beyond a folder name's 255 bytes
    (["--resume", "no-such-run"], "resume"),
    (["--resume", "a" * 300], "resume"),
    (["--resume", "no-such-run", "--run-id", "other"], "run_id"),  # a resumed run keeps its id
    ([], "scenario"),
]


@pytest.fixture()
def places(tmp_path, monkeypatch):
    """Paths the inputs name, an empty cache and an empty runs folder; the Hugging Face Hub offline (as tests/conftest.py
    sets it) with an empty cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read by snapshot_download at call time
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("TITANFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TITANFLOW_RUNS", str(tmp_path / "runs"))
    return {"missing": str(tmp_path / "missing"), "file": str(tmp_path / "a-file"), "empty": str(tmp_path / "empty")}


def _refusal_lines(err: str) -> list[str]:
    assert err.startswith("titanflow: bad input:\n"), err
    return err.removeprefix("titanflow: bad input:\n").strip().splitlines()


@pytest.mark.parametrize(("args", "field"), RUN_INPUTS, ids=[" ".join(a)[:60] or "none" for a, _ in RUN_INPUTS])
def test_a_refused_run_names_the_field_and_the_fix_and_writes_nothing(places, tmp_path, capsys, args, field):
    args = [arg.format(**places) for arg in args]
    assert main(["run", *args]) == 2
    lines = _refusal_lines(capsys.readouterr().err)
    assert lines[0].startswith(f"{field}: "), lines
    for line in lines:
        assert re.match(r"^[a-z_]+(\.[a-z_]+)?: ", line) and "fix: " in line, line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not (tmp_path / "cache").exists()


def test_every_bad_field_of_one_run_is_named_in_one_refusal(places, capsys):
    """An unknown scenario and target are field errors like a bound's: all three are told at once, not one a try."""
    assert main(["run", "nosuch", "--target", "tpu", "--steps", "0"]) == 2
    lines = _refusal_lines(capsys.readouterr().err)
    assert [line.split(":")[0] for line in lines] == ["scenario", "target", "steps"]


@pytest.mark.parametrize(("args", "field"), [
    (["{missing}", "{out}", "--layers", "1", "--experts", "1", "--top-k", "1"], "source"),  # the command's name for it
    (["{empty}", "{out}", "--layers", "0", "--experts", "1", "--top-k", "1"], "layers"),
], ids=["missing source", "zero layers"])
def test_a_refused_trim_names_its_own_arguments_and_the_fix(places, tmp_path, capsys, args, field):
    args = [arg.format(**places, out=str(tmp_path / "out")) for arg in args]
    assert main(["trim", *args]) == 2
    (line,) = _refusal_lines(capsys.readouterr().err)
    assert line.startswith(f"{field}: ") and "fix: " in line, line
    assert not (tmp_path / "out").exists()


def test_a_refused_nightly_names_the_target_and_the_fix(places, capsys):
    assert main(["nightly", "--target", "tpu"]) == 2
    (line,) = _refusal_lines(capsys.readouterr().err)
    assert line.startswith("target: unknown 'tpu'; fix: pass one of cpu, "), line


@pytest.mark.parametrize("text, said", [("{bad", "Invalid JSON"), ('{"a": 1}', "run_id: Field required")])
def test_resuming_a_run_whose_summary_cannot_be_read_names_it_and_the_fix(places, tmp_path, capsys, text, said):
    folder = tmp_path / "runs" / "corrupt"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(text)
    assert main(["run", "--resume", "corrupt"]) == 2
    (line,) = _refusal_lines(capsys.readouterr().err)
    assert line.startswith(f"resume: {folder / 'summary.json'} is not a titanflow summary ({said}") and "; fix: " in line
    assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]


def test_a_trim_missing_its_keys_is_told_the_whole_form(places, capsys):
    assert main(["run", "moe", "--trim", "depth=2"]) == 2
    assert _refusal_lines(capsys.readouterr().err) == [
        "trim.layers: missing; fix: pass --trim layers=N,experts=E,top_k=K",
        "trim.experts: missing; fix: pass --trim layers=N,experts=E,top_k=K",
        "trim.top_k: missing; fix: pass --trim layers=N,experts=E,top_k=K",
        "trim.depth: not a parameter; fix: drop --trim depth="]
