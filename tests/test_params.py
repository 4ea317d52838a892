"""Bad input fails before any compute, naming the field (issue: bad input)."""

import time

import pytest
from pydantic import ValidationError

from titanflow.cli import main
from titanflow.params import ScenarioRun, check_runs_dir_writable, is_hub_id


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
    ],
)
def test_bad_field_is_named(fields, named):
    with pytest.raises(ValidationError) as err:
        ScenarioRun(**fields)
    assert named in str(err.value)


def test_defaults_resolve_from_the_target():
    run = ScenarioRun()
    assert (run.nproc_resolved, run.global_batch_size_resolved, run.seq_len_resolved) == (2, 4, 256)
    trn2 = ScenarioRun(target="trn2")
    assert (trn2.nproc_resolved, trn2.global_batch_size_resolved) == (64, 64)


def test_runs_dir_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="runs_dir"):
        check_runs_dir_writable(blocker / "runs")


def test_hub_ids_and_paths_are_told_apart():
    assert is_hub_id("Qwen/Qwen3-4B-Instruct-2507")
    assert not is_hub_id("/models/qwen")
    assert not is_hub_id("./models/qwen")


def test_cli_refuses_bad_input_in_seconds_without_prefect(capsys):
    start = time.monotonic()
    assert main(["run", "native", "--target", "cpu", "--steps", "0"]) == 2
    assert time.monotonic() - start < 5  # no server started, nothing trained
    assert "steps" in capsys.readouterr().err
