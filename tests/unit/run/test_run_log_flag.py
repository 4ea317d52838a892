"""``titanflow run --log``: the Prefect log instead of the progress view (titanflow.run.console), a flag of the
command line only, never a scenario parameter."""

from __future__ import annotations

import pytest

from titanflow import cli


def test_run_takes_log_and_keeps_it_out_of_the_scenario_parameters(tmp_path):
    parser = cli.build_parser()
    assert parser.parse_args(["run", "native"]).log is False
    args = parser.parse_args(["run", "native", "--target", "cpu", "--steps", "3", "--log", "--runs-dir", str(tmp_path)])
    assert args.log is True
    run, given, _ = cli._preflighted(args, launch=False)
    assert "log" not in given and run.steps == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["render", "native", "--log"])  # render prints no log: no such flag
