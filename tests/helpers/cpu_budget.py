"""The suite's CPU budget: each test's CPU seconds, and at the end the total, the budget and the ten dearest tests.

A test's CPU is what its process spent from its setup to the end of its teardown (user + system) plus what the
processes it started and waited for spent (``getrusage(RUSAGE_CHILDREN)``: torchrun and its ranks, a Prefect server a
fixture stopped). CPU, not wall time: wall time swings with whatever else the machine runs, CPU much less. With
pytest-xdist each worker measures its own tests and sends the figure with the test's report (``user_properties``);
the controller sums them. A server a session fixture keeps until the end is counted by no test.
"""

from __future__ import annotations

import csv
import os
import resource

import pytest

#: pytest's CPU-seconds budget for `make test` (its tests, install excluded): 25 minutes of CI with the 4-minute
#: install, at the 1.5 cores the suite keeps busy on the 2-core CI machines, less a margin for slow days.
BUDGET_CPU_S = 2000
#: How many of the dearest tests the summary lists.
DEAREST = 10
#: Environment variable naming a CSV file that receives every test's CPU seconds (``test,cpu_s``, dearest first),
#: for finding where the suite's time goes: ``TITANFLOW_CPU_REPORT=/tmp/cpu.csv make test`` (the lowest lane's into
#: ``/tmp/cpu-lowest.csv``: the Makefile's test-lowest).
REPORT_ENV = "TITANFLOW_CPU_REPORT"


def cpu_seconds() -> float:
    """User + system seconds of this process and of the children it has waited for, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_started: dict[str, float] = {}
_measured: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _started[item.nodeid] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and item.nodeid in _started:
        outcome.get_result().user_properties.append(("cpu_s", round(cpu_seconds() - _started.pop(item.nodeid), 2)))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "cpu_s":
                _measured[report.nodeid] = value


def pytest_terminal_summary(terminalreporter):
    """The budget line and the dearest tests, at the end of the run (the controller's, under xdist)."""
    if not _measured:
        return
    total = sum(_measured.values())
    verdict = "within" if total <= BUDGET_CPU_S else "OVER"
    terminalreporter.write_sep("-", "CPU budget")
    terminalreporter.write_line(f"tests' CPU: {total:,.0f} s over {len(_measured)} tests, {verdict} the budget of "
                                f"{BUDGET_CPU_S:,} CPU-s (tests/helpers/cpu_budget.py)")
    terminalreporter.write_line(f"the {DEAREST} dearest (CPU-s, test):")
    dearest = sorted(_measured.items(), key=lambda item: -item[1])
    for nodeid, seconds in dearest[:DEAREST]:
        terminalreporter.write_line(f"{seconds:9.1f}  {nodeid}")
    if os.environ.get(REPORT_ENV):
        with open(os.environ[REPORT_ENV], "w", newline="") as out:
            csv.writer(out).writerows([("test", "cpu_s"), *dearest])
        terminalreporter.write_line(f"every test's CPU: {os.environ[REPORT_ENV]}")
