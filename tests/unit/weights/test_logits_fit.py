"""titanflow.weights.fit.check_logits_fit: a batch whose float32 logits cannot be held by a rank is refused before
anything is launched, naming the largest batch (or sequence length) that fits.

The figures are derived here from the rule: one loss chunk's logits and their log-softmax, 2 x (local batch x seq_len
/ chunks tokens x vocab x 4 bytes), against trn2's 24 GiB a rank (96 GiB of HBM a Trainium2 chip over its 4 logical
cores at LNC=2) or, on the cpu target, this machine's memory over the node's ranks."""

import psutil
import pytest

from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS, TRN2_RANK_MEMORY_BYTES
from titanflow.cli import main
from titanflow.params import ScenarioRun
from titanflow.weights.fit import check_logits_fit, rank_memory

QWEN3_VOCAB = 151_936  # Qwen3's vocab_size (config.json of Qwen3-4B-Instruct-2507 and of the tiny models)
COPIES = 2  # the logits and their log-softmax, alive at once


def test_trn2_rank_memory_is_a_trainium2_chips_hbm_over_its_logical_cores():
    assert TRN2_RANK_MEMORY_BYTES == 24 * 2**30
    assert rank_memory(ScenarioRun(target="trn2"))[0] == 24 * 2**30
    assert rank_memory(ScenarioRun(target="trn2-cluster"))[0] == 24 * 2**30


def test_a_trn2_batch_fits_up_to_the_largest_multiple_of_the_world_size_and_is_refused_beyond():
    # native on trn2: seq_len 4096 in 8 chunks, 2 x 512 tokens x 151936 x 4 B = 622,329,856 B a sequence;
    # 24 GiB holds 41 of them: 41 x 64 ranks = 2624 sequences
    per_sequence = COPIES * 4096 // 8 * QWEN3_VOCAB * 4
    most = 24 * 2**30 // per_sequence * 64
    assert (per_sequence, most) == (622_329_856, 2624)
    check_logits_fit(ScenarioRun(target="trn2", global_batch_size=most), QWEN3_VOCAB)
    with pytest.raises(ValueError, match=r"^global_batch_size: 2688: 42 sequence\(s\) of 4096 tokens a rank \(64 "
                                         r"rank\(s\)\) .* 24 GiB of device memory a trn2 rank; fix: pass "
                                         r"--global-batch-size 2624 or less"):
        check_logits_fit(ScenarioRun(target="trn2", global_batch_size=most + 64), QWEN3_VOCAB)


def test_when_not_one_sequence_fits_the_sequence_length_is_named():
    # a vocabulary of 10^8: 24 GiB holds 32 tokens of a chunk (2 x 4 B x 10^8 each), 8 chunks: 256 tokens
    vocab = 10**8
    longest = 24 * 2**30 // (COPIES * vocab * 4) * 8
    assert longest == 256
    with pytest.raises(ValueError, match=rf"^seq_len: 4096: .*; fix: pass --seq-len {longest} or less$"):
        check_logits_fit(ScenarioRun(target="trn2"), vocab)


def test_a_vocabulary_too_large_for_the_shortest_sequence_names_the_weights():
    # a vocabulary of 10^10: one token needs 2 x 37.3 GiB, beyond 24 GiB; no sequence length fits
    # (5 x 10^8 still would: 6 tokens a chunk, 8 chunks, --seq-len 48)
    with pytest.raises(ValueError, match=r"^weights: vocab_size 10000000000 of the model's config.json needs 74\.5 "
                                         r"GiB a token .*: not even 16 tokens a rank fit 24 GiB"):
        check_logits_fit(ScenarioRun(target="trn2"), 10**10)
    with pytest.raises(ValueError, match=r"^seq_len: 4096: .*; fix: pass --seq-len 48 or less$"):
        check_logits_fit(ScenarioRun(target="trn2"), 5 * 10**8)


@pytest.mark.parametrize("target", [name for name, target in TARGETS.items() if target().device != "cuda"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_scenarios_default_workload_fits(target, scenario):
    """Every scenario's default workload on every target whose rank memory is known here (a GPU's is not)."""
    check_logits_fit(ScenarioRun(scenario=scenario, target=target), QWEN3_VOCAB)


def test_a_gpus_memory_and_a_cpu_node_slurm_picks_are_not_known_here():
    assert rank_memory(ScenarioRun(target="cuda")) is None
    assert rank_memory(ScenarioRun(target="cpu", scheduler="slurm")) is None
    check_logits_fit(ScenarioRun(target="cuda", global_batch_size=8 * 10**6), QWEN3_VOCAB)  # not refused here


@pytest.mark.parametrize("init", ["random", "pretrained"])
def test_an_absurd_cpu_batch_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, init):
    """`titanflow run native --global-batch-size 1000000` trained nothing for minutes, the dataset re-looped to fill
    500,000 sequences a rank, until the timeout; now it is refused in preflight, with this machine's largest batch,
    before the embedded model is built (seconds on a fresh clone; its pretrained checkpoint, minutes): the cache
    folder is not even made."""
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    monkeypatch.setenv("TITANFLOW_CACHE", str(cache))
    assert main(["run", "native", "--target", "cpu", "--init", init, "--global-batch-size", "1000000",
                 "--runs-dir", str(runs)]) == 2
    assert not cache.exists()
    err = capsys.readouterr().err
    # the cpu target: 2 ranks share this machine's memory; 256 tokens in 8 chunks, 2 x 32 x 151936 x 4 B a sequence
    most = psutil.virtual_memory().total // 2 // (COPIES * 256 // 8 * QWEN3_VOCAB * 4) * 2
    assert "global_batch_size: 1000000: 500000 sequence(s) of 256 tokens a rank (2 rank(s))" in err
    assert f"beyond this machine's {psutil.virtual_memory().total / 2**30:.1f} GiB of memory over its 2 rank(s); " \
           f"fix: pass --global-batch-size {most} or less" in err
    assert not runs.exists()  # nothing made: the folder the writable check made to try is removed again
