import math

import pytest

from titanflow.launch.metrics import metrics_table, parse_step_line

# A rank-0 line as torchtitan 0.3.0 logs it through torchrun --tee (colour codes included).
LINE = ("[default0]:[titan] 2026-11-29 21:32:24,714 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 11.95009  "
        "\x1b[38;2;180;60;0mgrad_norm:  1.1346  \x1b[38;2;54;234;195mmemory:  0.98GiB(4.14%)  \x1b[34mtps: 25  "
        "\x1b[36mtflops: 0.00  \x1b[35mmfu: 0.00%\x1b[39m")


def test_step_line_is_parsed_through_colour_codes_and_rank_prefix():
    row = parse_step_line(LINE)
    assert {k: v for k, v in row.items() if k != "step_time_s"} == {
        "step": 1, "loss": 11.95009, "grad_norm": 1.1346, "memory_gib": 0.98, "tps": 25.0, "tflops": 0.0, "mfu_pct": 0.0}
    assert math.isnan(row["step_time_s"])  # the console line prints no step time


def test_a_line_without_tflops_and_mfu_still_parses_with_them_nan():
    row = parse_step_line(LINE.split("\x1b[36mtflops")[0])
    assert row["tps"] == 25.0 and math.isnan(row["tflops"]) and math.isnan(row["mfu_pct"])


@pytest.mark.fault
def test_nan_loss_is_kept_as_nan():
    row = parse_step_line(LINE.replace("11.95009", "nan"))
    assert math.isnan(row["loss"])


def test_table_keeps_one_row_per_step_in_order():
    second = LINE.replace("step:  1", "step:  2").replace("11.95009", "11.90140")
    table = metrics_table([second, "noise", LINE, LINE])
    assert list(table.step) == [1, 2]
    assert list(table.loss) == [11.95009, 11.90140]


@pytest.mark.fault
def test_log_tail_is_bounded_in_bytes_when_a_line_is_megabytes(tmp_path):
    """A 5 MB line (a child dumping a tensor, say) is cut to TAIL_LINE_CHARS with the count of what was cut,
    and a 5 MB last line without newline is read only in its last TAIL_READ_BYTES."""
    from titanflow.launch.metrics import TAIL_LINE_CHARS, TAIL_READ_BYTES, log_tail

    log = tmp_path / "train.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)) + "\n" + "y" * 500_000 + "\nlast one\r\n")
    tail = log_tail(log, 3).split("\n")
    assert tail == ["line 99", "y" * TAIL_LINE_CHARS + f" ... [{500_000 - TAIL_LINE_CHARS} characters cut]", "last one"]
    with open(log, "a") as f:
        f.write("z" * 5_000_000)
    only = log_tail(log, 3)
    shown = "... " + "z" * TAIL_READ_BYTES  # the line's start was not read
    assert only == shown[:TAIL_LINE_CHARS] + f" ... [{len(shown) - TAIL_LINE_CHARS} characters cut]"
