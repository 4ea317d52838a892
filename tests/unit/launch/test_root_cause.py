"""The root cause of a failed launch is the first failing rank's own error, read from the per-rank files
torchrun writes, and it alone decides the class, the retry and what the summary says.

Fixtures (tests/fixtures/failure_logs/README.md): ``ranks_missing_key`` is a real 2-rank launch whose
checkpoint lost ``model.layers.0.input_layernorm.weight`` after render (torchtitan dies loading it, before
its trainer loop: no error.json); ``ranks_nan`` a real launch with lr 1e6 (its trainer loop raises "Loss
is not finite" at step 3 and torchelastic writes error.json); ``ranks_killed`` a real launch whose rank 1
was sent SIGKILL mid-run (rank 0 then writes error.json for the lost connection; torchrun names rank 1).
"""

import shutil

import pytest
from prefect.states import Failed

from helpers import FIXTURES
from helpers.torchrun_reports import KILLED, LOST_PEER, child_failed_report
from titanflow.judge.failures import classify_failure, root_cause
from titanflow.launch.process import ProcessResult
from titanflow.launch.root_cause import MAX_MESSAGE_CHARS, first_rank_error
from titanflow.launch.torchrun import launch_error
from titanflow.tasks.retry import retry_infrastructure_only

pytestmark = pytest.mark.fault

LOGS = FIXTURES / "failure_logs"
MISSING = "RuntimeError: Missing key in checkpoint state_dict: model.layers.0.input_layernorm.weight."
NAN = "RuntimeError: Loss is not finite (global_avg_loss=nan) at step 3. Stopping training."


class _Task:
    name = "train"


def _error(case: str) -> str:
    """The train task's error for the fixture launch ``case``, as run_training raises it."""
    folder = LOGS / case
    result = ProcessResult(returncode=1, wall_s=9.0, timed_out=False, peak_rss_bytes=0,
                           tail=(folder / "launch" / "attempt_0" / "0" / "stderr.log").read_text().splitlines())
    log = folder / "train.log" if (folder / "train.log").is_file() else folder / "none.log"
    return f"TrainingError: {launch_error('train', 'torchrun exited 1', result, log, folder)}"


def test_a_checkpoint_that_does_not_load_is_named_from_the_rank_stderr():
    root = first_rank_error(LOGS / "ranks_missing_key", (LOGS / "ranks_missing_key" / "train.log").read_text())
    assert (root.rank, root.message) == (0, MISSING) and root.source.endswith("0/stderr.log")


def test_the_oldest_error_json_is_the_root_cause():
    root = first_rank_error(LOGS / "ranks_nan")
    assert root.message == NAN and root.source.endswith("error.json")


def test_a_rank_killed_mid_run_is_the_root_cause_not_the_peer_that_lost_it():
    """Rank 0's error.json (a gloo "Connection closed by peer") is newer than rank 1's death; torchrun's
    first observed failure is rank 1, killed by signal 9, and that is the root cause."""
    root = first_rank_error(LOGS / "ranks_killed", (LOGS / "ranks_killed" / "train.log").read_text())
    assert (root.rank, root.message) == (1, KILLED) and root.source == "torchrun's launcher log"


@pytest.mark.parametrize("case, rank, message, cls, retried", [
    ("ranks_missing_key", 0, MISSING, "input", False),
    ("ranks_nan", 0, NAN, "numerics", False),
    ("ranks_killed", 1, KILLED, "infrastructure", True),
])
def test_the_root_cause_decides_the_class_the_retry_and_the_message(case, rank, message, cls, retried):
    error = _error(case)
    assert error.startswith(f"TrainingError: train: torchrun exited 1; root cause (rank {rank}): {message}; "
                            "full log")
    assert root_cause(error) == message
    assert classify_failure(verdict="fail", failed_task="train", error=error, losses=None) == cls
    state = Failed(data=RuntimeError(error.split(": ", 1)[1]))  # what Prefect's retry condition sees
    assert retry_infrastructure_only(_Task(), None, state) is retried


def test_a_megabyte_exception_line_is_cut(tmp_path):
    launch = tmp_path / "ranks" / "launch" / "attempt_0" / "0"
    launch.mkdir(parents=True)
    (launch / "stderr.log").write_text("[rank0]: ValueError: " + "x" * 2_000_000 + "\n")
    root = first_rank_error(tmp_path / "ranks")
    assert len(root.message) <= MAX_MESSAGE_CHARS + len(" ... [cut]") and root.message.startswith("ValueError: xx")


def test_no_rank_error_means_no_root_cause(tmp_path):
    shutil.copytree(LOGS / "ranks_missing_key" / "launch", tmp_path / "launch")
    for stderr in tmp_path.glob("launch/attempt_0/*/stderr.log"):
        stderr.write_text("[titan] training step 1\n")  # killed from outside: no exception printed
    assert first_rank_error(tmp_path) is None


def test_a_launch_the_watchdog_ended_names_the_timeout_not_a_stopped_rank():
    result = ProcessResult(returncode=-15, wall_s=8.0, timed_out=True, peak_rss_bytes=0, tail=["step: 1 ..."])
    error = str(launch_error("train", "timed out after 8 s", result, LOGS / "none.log", LOGS / "ranks_nan"))
    assert root_cause(error) is None and error.startswith("train: timed out after 8 s; full log")
    assert classify_failure(verdict="fail", failed_task="train", error=error, losses=None) == "infrastructure"


def test_a_launch_that_printed_nothing_says_so_not_an_empty_tail():
    """`titanflow run native --steps 3 --timeout-s 3`: torchrun had printed nothing when the watchdog ended it."""
    result = ProcessResult(returncode=-15, wall_s=3.0, timed_out=True, peak_rss_bytes=0, tail=[])
    error = str(launch_error("train", "timed out after 3 s", result, LOGS / "none.log", LOGS / "ranks_nan"))
    assert error == f"train: timed out after 3 s; full log {LOGS / 'none.log'}; the launch printed nothing before it ended"
    assert classify_failure(verdict="fail", failed_task="train", error=error, losses=None) == "infrastructure"




def test_a_rank_that_lost_its_peer_is_not_the_root_cause_even_when_torchrun_observed_it_first(tmp_path):
    """torchrun orders failures by the second and lists the lower rank first within one; a forked rank exits within
    milliseconds of losing its peer, so rank 0's "Connection closed by peer" (its error.json, ranks_killed's) can be
    the first observed failure while rank 1, killed by SIGKILL, is listed after it: rank 1 is the root cause."""
    shutil.copytree(LOGS / "ranks_killed" / "launch", tmp_path / "launch")
    report = child_failed_report((0, "Traceback (most recent call last):"), [(1, KILLED)])
    root = first_rank_error(tmp_path, report)
    assert (root.rank, root.message) == (1, KILLED)
    # alone, the lost peer is all there is to name
    only = first_rank_error(tmp_path, child_failed_report((0, "Traceback (most recent call last):"), []))
    assert only.rank == 0 and "Connection closed by peer" in only.message


def test_without_a_report_an_error_file_that_is_more_than_a_lost_peer_comes_first(tmp_path):
    """No launcher report (a launcher killed before printing one): the error files decide, the oldest first, except
    that a lost peer's comes after any other."""
    import json

    shutil.copytree(LOGS / "ranks_nan" / "launch", tmp_path / "launch")
    files = sorted(tmp_path.glob("launch/attempt_0/*/error.json"))
    nan = json.loads(files[0].read_text())
    peer = json.loads(json.dumps(nan))
    peer["message"]["message"] = LOST_PEER
    peer["message"]["extraInfo"]["timestamp"] = str(int(nan["message"]["extraInfo"]["timestamp"]) - 5)  # older
    lost = tmp_path / "launch" / "attempt_0" / "1" / "error.json"
    lost.parent.mkdir(exist_ok=True)
    lost.write_text(json.dumps(peer))
    root = first_rank_error(tmp_path)
    assert root.message == NAN and root.rank == int(files[0].parent.name)


@pytest.mark.parametrize("message, cls", [
    # torchtitan's own config checks and a token id past the embedding (a config.json vocab_size below the tokenizer's)
    ("ValueError: Sequence length 100 must be divisible by the product of TP degree and 2 * CP degree", "input"),
    ("AssertionError: global batch size must be a multiple of local batch size times data-parallel degree", "input"),
    ("IndexError: index out of range in self", "input"),
    # a ValueError of a rendezvous is the infrastructure signature's; another exception type keeps the task's class
    ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
     "expected, but not set", "infrastructure"),
    ("TypeError: 'NoneType' object is not subscriptable", "infrastructure"),
])
def test_a_ranks_own_refusal_of_its_configuration_is_input_and_never_retried(message, cls):
    """Each of these fails the same way on every launch: retrying it (twice, a full launch each) only delays the
    verdict, and the history would count a configuration error as a flaky machine."""
    error = f"TrainingError: train: torchrun exited 1; root cause (rank 1): {message}; full log runs/x/train.log"
    assert classify_failure(verdict="fail", failed_task="train", error=error, losses=None) == cls
    state = Failed(data=RuntimeError(error.split(": ", 1)[1]))  # what Prefect's retry condition sees
    assert retry_infrastructure_only(_Task(), None, state) is (cls == "infrastructure")
