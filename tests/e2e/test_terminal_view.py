"""End to end on CPU: ``titanflow run`` on a terminal (a pseudo-terminal for stdout and stderr) shows the progress
view (titanflow.run.console) instead of the Prefect log, then the summary as in every mode. The run is the session's
native golden run (tests/e2e/conftest.py ``native_golden_run``: 10 steps on a pseudo-terminal); every other
end-to-end test reads ``titanflow run`` through pipes: the Prefect log, as before.
"""

import re


#: The start of a line of Prefect's console handler (logging.yml's ``standard`` format: ``12:01:02.345 | INFO    |``).
PREFECT_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| [A-Z]+ +\|", re.MULTILINE)


def test_a_terminal_gets_the_progress_view_then_the_summary(native_golden_run):
    summary, shown = native_golden_run
    print(f"\n{shown}")
    assert summary.verdict == "pass", shown[-3000:]
    for task in ("pull_weights", "render_config", "compile_warmup", "train", "export", "validate", "compare_loss"):
        assert re.search(rf"^✓ {task} +{summary.timings_s[task]:.1f} s", shown, re.MULTILINE), task
    # training's status line: its last step as torchtitan logged it, tokens/s of both ranks
    last, steps = summary.train.losses[-1], len(summary.train.losses)
    assert re.search(rf"^✓ train .* {steps}/{steps} steps · loss {last:.4f} · \d+ tokens/s$", shown, re.MULTILINE)
    assert not PREFECT_LOG_LINE.search(shown)  # no Prefect log line
    assert re.search(r"^verdict +pass$", shown, re.MULTILINE)  # the summary, as in every mode
    assert shown.endswith(f"prefect flow run {summary.flow_run_id}: Completed")
