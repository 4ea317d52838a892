"""The suite's CPU budget (tests/helpers/cpu_budget.py): a test's CPU counts the processes it started and waited for,
and the end of the run prints the total against the budget and the dearest tests."""

import os
import subprocess
import sys
from pathlib import Path

#: What the test below makes its child spend, by construction (CPU seconds of a busy loop).
BURNED_S = 1.0

BURNING_TEST = f'''
import subprocess, sys

def test_burn():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + {BURNED_S}\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_idle():
    pass
'''


def test_a_tests_cpu_counts_the_child_it_waited_for_and_the_summary_prints_the_budget(tmp_path):
    (tmp_path / "test_burning.py").write_text(BURNING_TEST)
    tests_dir = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "helpers.cpu_budget", "-p", "no:cacheprovider",
                             "test_burning.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tests_dir)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "over 2 tests, within the budget of 2,000 CPU-s" in result.stdout
    cpu = {line.split()[1].split("::")[-1]: float(line.split()[0]) for line in result.stdout.splitlines()
           if "test_burning.py::" in line and line.split()[0].replace(".", "").isdigit()}
    assert cpu["test_burn"] >= BURNED_S  # the child's own CPU, and its interpreter's start on top
    assert cpu["test_idle"] < 0.5  # nothing but the test's own bookkeeping
