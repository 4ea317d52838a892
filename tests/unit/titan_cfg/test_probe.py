"""The probe's batch, its tokenizer and the rank 0 sleep it takes out (titan_cfg/probe.py).

That the padded forward pass gives the trained model's logits is what the export's parity check asserts on every
end-to-end run (KL against transformers on the unpadded ids, tests/e2e/test_scenarios.py)."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from titan_cfg.probe import PROBE_TEXT, first_row_logits, probe_batch, probe_ids


def test_the_probe_batch_is_a_training_batch_shape_whose_first_row_starts_with_the_probe_ids():
    ids = torch.tensor([[5, 7, 9]], dtype=torch.int64)
    inputs, positions = probe_batch(ids, batch=2, seq_len=8)
    assert inputs.shape == positions.shape == (2, 8) and inputs.dtype == positions.dtype == torch.int64
    assert inputs.tolist() == [[5, 7, 9, 0, 0, 0, 0, 0]] * 2
    assert positions.tolist() == [list(range(8))] * 2
    assert inputs.is_contiguous() and positions.is_contiguous()  # strides as a data loader's batch has them


def test_a_probe_longer_than_the_sequence_keeps_every_id():
    ids = torch.arange(1, 11)[None]
    inputs, positions = probe_batch(ids, batch=1, seq_len=4)
    assert inputs.tolist() == [list(range(1, 11))] and positions.tolist() == [list(range(10))]


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_the_trainers_tokenizer_gives_the_same_ids_and_a_tokenizer_of_another_folder_is_not_used(tiny_assets,
                                                                                                    tmp_path):
    proc = _fresh_python(f"""
        from pathlib import Path
        from titan_cfg.compat.cpu import make_importable_without_triton
        make_importable_without_triton()
        from torchtitan.components.tokenizer import HuggingFaceTokenizer
        from titan_cfg.probe import probe_ids, trainer_tokenizer

        class Trainer:
            tokenizer = HuggingFaceTokenizer(tokenizer_path={str(tiny_assets.weights_dir)!r})

        loaded = trainer_tokenizer(Trainer(), Path({str(tiny_assets.weights_dir)!r}))
        assert loaded is Trainer.tokenizer.tokenizer
        print(probe_ids(Path("/nonexistent"), loaded).tolist())
        print(trainer_tokenizer(Trainer(), Path({str(tmp_path)!r})))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids_line, other_line = proc.stdout.strip().splitlines()[-2:]
    expected = probe_ids(tiny_assets.weights_dir)
    assert eval(ids_line) == expected.tolist() and expected.shape[1] > 20  # the text is a few dozen tokens
    assert other_line == "None"
    assert PROBE_TEXT.startswith("Ever since")


def test_torchtitans_rank_zero_sleep_is_still_there_and_install_takes_it_out():
    proc = _fresh_python("""
        import inspect, logging, time
        from pathlib import Path
        from titan_cfg.compat.cpu import make_importable_without_triton
        make_importable_without_triton()
        import torchtitan.trainer
        from titan_cfg import probe

        print(probe.rank_zero_sleep_still_there(), inspect.getsource(torchtitan.trainer).count("sleep("))
        probe.install(Path("/tokenizer"), Path("/dump"), tied_checkpoint=False)
        start = time.monotonic()
        torchtitan.trainer.time.sleep(2)
        print(round(time.monotonic() - start, 1), torchtitan.trainer.time.perf_counter is time.perf_counter)
        logging.basicConfig(level=logging.INFO, format="logged: %(message)s")
        torchtitan.trainer.logger.info(probe.RANK_ZERO_SLEEP_MESSAGE)  # what Trainer.train logs before the sleep
        torchtitan.trainer.logger.info("Training completed")
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    still_there, installed = proc.stdout.strip().splitlines()[-2:]
    assert still_there == "True 1"  # the one sleep is the rank 0 wait: when this fails, drop the patch
    assert installed == "0.0 True"
    assert probe_source_logs_the_sleep_message()  # torchtitan's own line, read from its source
    logged = [line for line in proc.stderr.splitlines() if line.startswith("logged: ")]
    assert logged == ["logged: Training completed"]  # the sleep's line is left out, the next one kept


def probe_source_logs_the_sleep_message() -> bool:
    """True while torchtitan's ``Trainer.train`` logs :data:`titan_cfg.probe.RANK_ZERO_SLEEP_MESSAGE` before it sleeps."""
    from titan_cfg.probe import RANK_ZERO_SLEEP_MESSAGE

    trainer = Path(importlib.util.find_spec("torchtitan.trainer").origin).read_text()
    return f'logger.info("{RANK_ZERO_SLEEP_MESSAGE}")' in trainer


def test_the_saved_probe_logits_hold_the_first_rows_tokens_alone(tmp_path):
    """The probe runs at a training batch's shape (cpu: [2, 256]); what is saved is row 0's first L positions. A
    slice of the batch's logits shares its storage, and torch.save writes a tensor's whole storage: a 37-token probe
    of Qwen3's 151936-token vocabulary wrote 311 MB (2 x 256 x 151936 x 4 bytes) instead of 22.5 MB."""
    batch_logits = torch.randn(2, 256, 1000)
    kept = first_row_logits(batch_logits, 37)
    assert kept.shape == (1, 37, 1000) and torch.equal(kept, batch_logits[:1, :37])
    assert kept.untyped_storage().nbytes() == 37 * 1000 * 4
    torch.save({"logits": kept}, tmp_path / "probe.pt")
    assert (tmp_path / "probe.pt").stat().st_size < 37 * 1000 * 4 + 4096  # the logits and the file's own framing
