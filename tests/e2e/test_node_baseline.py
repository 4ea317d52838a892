"""A node's own baseline end to end, on cpu with user weights (a copy of the tiny Qwen3 folder passed by ``--weights``,
so no cpu golden applies), every run 1 rank x 2 steps, all sharing one runs folder and one history folder:

1. the first run passes, its curve finding "no baseline on this node" with the promote command;
2. ``titanflow golden promote`` of it; a second identical run is judged on every step against it (exact lane);
3. a planted numerics change that leaves the workload key alone (the learning rate x100 from the 1st optimizer step
   on, planted in the ranks by a ``sitecustomize.py`` on their PYTHONPATH, which torchrun passes on) fails the curve at
   step 2, the first step whose loss follows that update, and the finding names it;
4. a run with the lowest lane's venv (.venv-lowest: ``make setup-lowest``) is judged in the band lane, naming the
   packages that differ from the baseline's stack;
5. a planted slowdown (a 20 s sleep after optimizer step 2, the step titanflow's tokens/s is read from: steps >= 2,
   by the same kind of sitecustomize) is flagged "1 of 2" on its first run and fails the second, class performance.

The rules are the committed golden_curve rule (margin 0.02, band 0.2) and one tokens/s rule at a 50 % margin without
a noise floor, given by $TITANFLOW_REGRESSION_RULES: the committed tokens/s floor (250, measured on two ranks under the
suite's load) is more than this one-rank workload's whole throughput (120 to 475 tokens/s measured here), and under the
suite's load a run slows by up to 48 % (benchmarks/noise_floor.py), so only the sleep, which takes the throughput to
at most 51 tokens/s (1024 tokens per step over 4-9 s of step plus 20 s), leaves 50 %. A shorter sleep gives that up:
against the slowest baseline measured (120 tokens/s, 8.5 s a step) a slowed run must take over 17 s at step 2, and
its own step takes as little as 1.9 s (553 tokens/s, an idle machine), so 15 s would leave 16.9 s, 61 tokens/s, not
flagged; 20 s leaves 21.9 s, 47 tokens/s. The sleep costs wall time, not CPU: one slowed run took 33.6 CPU-s and
60 s, the same run without the sleep 34.5 CPU-s and 38 s (``titanflow run`` with its own Prefect server, here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from titanflow.judge.environment import stack_difference
from titanflow.judge.regression import load_rules
from titanflow.paths import REPO_ROOT
from titanflow.record.summary import RunSummary, read_summary

pytestmark = pytest.mark.xdist_group("node-baseline")  # one module fixture chain: its runs on one worker

#: The lowest lane's venv (make setup-lowest); $TITANFLOW_LOWEST_VENV names another (a worktree's checkout).
LOWEST_VENV = Path(os.environ.get("TITANFLOW_LOWEST_VENV") or REPO_ROOT / ".venv-lowest")

#: Every run's parameters: the workload the baseline is of.
OPTIONS = ("--init", "random", "--steps", "2", "--nproc-per-node", "1")

#: The seconds the planted slowdown sleeps after the 2nd optimizer step.
SLEEP_S = 20

#: A sitecustomize.py run at the start of every Python with its folder on PYTHONPATH; it acts only in the process
#: that launches the ranks (torchrun's, which has $TITANFLOW_JOB) and so in its ranks, registering torch's global
#: optimizer step hooks from the optimizer step PLANT_FROM on.
SITECUSTOMIZE = textwrap.dedent('''
    import os
    if os.environ.get("TITANFLOW_JOB"):
        import time
        import torch.optim.optimizer as optimizer
        FROM, LR_TIMES, SLEEP_S = int(os.environ["PLANT_FROM"]), float(os.environ.get("PLANT_LR_TIMES", "1")), \\
            float(os.environ.get("PLANT_SLEEP_S", "0"))
        steps, kept = {}, {}

        def inner(opt):  # torch's own optimizers, not torchtitan's container of them (its groups carry no lr)
            return bool(opt.param_groups) and all("lr" in group for group in opt.param_groups)

        def before(opt, args, kwargs):
            if inner(opt):
                steps[id(opt)] = steps.get(id(opt), 0) + 1
                if steps[id(opt)] >= FROM:
                    for i, group in enumerate(opt.param_groups):
                        kept[(id(opt), i)] = group["lr"]
                        group["lr"] = group["lr"] * LR_TIMES

        def after(opt, args, kwargs):
            for i, group in enumerate(opt.param_groups):
                if (id(opt), i) in kept:
                    group["lr"] = kept.pop((id(opt), i))
            if inner(opt) and steps[id(opt)] >= FROM and SLEEP_S:
                time.sleep(SLEEP_S)

        optimizer.register_optimizer_step_pre_hook(before)
        optimizer.register_optimizer_step_post_hook(after)
''')


class Node:
    """The module's node: one runs folder, one history folder, the user's weights folder, the rules file."""

    def __init__(self, root: Path, weights: Path, api: str):
        self.root, self.weights, self.api = root, weights, api
        self.runs, self.history, self.rules = root / "runs", root / "history", root / "rules.toml"
        curve = next(r for r in load_rules().rules if r.kind == "golden_curve")
        self.rules.write_text(
            f'[[rules]]\nmetric = "losses"\nkind = "golden_curve"\nmargin = {curve.margin}\nband = {curve.band}\n'
            'class = "numerics"\n\n[[rules]]\nmetric = "tokens_per_s"\nkind = "history_median"\n'
            'direction = "lower_is_worse"\nmargin = 0.5\nclass = "performance"\n')
        plant = root / "plant"
        plant.mkdir()
        (plant / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.plant = plant

    def run(self, run_id: str, *, python: Path = Path(sys.executable), **env: str) -> tuple[RunSummary, str]:
        """``titanflow run native --target cpu`` of the workload with the user's weights, by ``python``, against the
        session's Prefect server, with the module's history and rules and ``env`` on top -> (summary, output)."""
        environ = {**os.environ, "PREFECT_API_URL": self.api, "TITANFLOW_HISTORY": str(self.history),
                   "TITANFLOW_REGRESSION_RULES": str(self.rules), **env}
        proc = subprocess.run([str(python), "-m", "titanflow.cli", "run", "native", "--target", "cpu", *OPTIONS,
                               "--weights", str(self.weights), "--runs-dir", str(self.runs), "--run-id", run_id,
                               "--log"], capture_output=True, text=True, timeout=900, env=environ)
        return read_summary(self.runs / run_id / "summary.json"), proc.stdout[-4000:] + proc.stderr[-4000:]

    def planted(self, **plant: str) -> dict[str, str]:
        """The environment that plants ``plant`` (PLANT_FROM, PLANT_LR_TIMES, PLANT_SLEEP_S) in the ranks."""
        return {"PYTHONPATH": os.pathsep.join([str(self.plant), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
                **plant}


def _finding(summary: RunSummary, metric: str):
    (found,) = [f for f in summary.findings if f.metric == metric]
    return found


@pytest.fixture(scope="module")
def node(tmp_path_factory, tiny_assets, prefect_api) -> Node:
    import shutil

    root = tmp_path_factory.mktemp("node")
    weights = root / "my-qwen3"
    shutil.copytree(tiny_assets.weights_dir, weights)  # the user's own folder: no cpu golden is of it
    return Node(root, weights, prefect_api)


@pytest.fixture(scope="module")
def first(node):
    return node.run("first")


@pytest.fixture(scope="module")
def promoted(node, first) -> tuple[int, str]:
    """``titanflow golden promote first --why ...`` (the command's main, in this process) -> (exit code, stdout)."""
    import contextlib
    import io

    from titanflow.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["golden", "promote", "first", "--why", "first night on this node", "--history-dir",
                     str(node.history)])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def second(node, promoted):
    return node.run("second")


@pytest.fixture(scope="module")
def planted_numerics(node, second):
    return node.run("lr-x100", **node.planted(PLANT_FROM="1", PLANT_LR_TIMES="100"))


@pytest.fixture(scope="module")
def lowest(node, planted_numerics):
    if not (LOWEST_VENV / "bin" / "python").is_file():
        pytest.fail(f"no lowest lane's venv at {LOWEST_VENV}; fix: make setup-lowest (or set TITANFLOW_LOWEST_VENV)")
    # the session's Prefect server (its client is the older Prefect: 3.9.0 against 3.9.1), a home of its own
    return node.run("lowest", python=LOWEST_VENV / "bin" / "python", PREFECT_HOME=str(node.root / "lowest"),
                    PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def slowed(node, lowest):
    plant = node.planted(PLANT_FROM="2", PLANT_SLEEP_S=str(SLEEP_S))
    return node.run("slow-1", **plant), node.run("slow-2", **plant)


def test_the_first_run_with_user_weights_passes_saying_no_baseline_and_the_promote_command(first):
    summary, output = first
    assert summary.verdict == "pass", output
    curve = _finding(summary, "losses")
    assert curve.status == "no baseline"
    assert curve.detail.endswith("and no baseline on this node; make this run the baseline of its workload on this "
                                 "node: titanflow golden promote first")
    assert _finding(summary, "tokens_per_s").status == "no baseline"  # no baseline figure, no history of it


def test_a_promoted_run_judges_the_next_identical_one_on_every_step_in_the_exact_lane(first, promoted, second):
    code, said = promoted
    assert code == 0 and said.startswith("promoted run first as baseline native-cpu-random-"), said
    summary, output = second
    assert summary.verdict == "pass", output
    curve = _finding(summary, "losses")
    assert (curve.status, curve.margin) == ("pass", 0.02)
    assert "worst of 2 steps vs node baseline" in curve.detail and "exact lane: the same environment" in curve.detail
    # every step against the baseline's: the same sums in the same environment
    assert summary.losses == first[0].losses
    # the first step is expected from the baseline too (titanflow.judge.expectations.NODE_BASELINE)
    assert summary.loss.expectation_source.startswith("node baseline native-cpu-random-")
    assert (summary.loss.expected_first_step_loss, summary.loss.tolerance) == (first[0].losses[0], 0.02)


def test_a_planted_numerics_change_fails_the_curve_at_the_step_where_it_parts(first, planted_numerics):
    """The learning rate x100 from the 1st optimizer step: step 1 is the baseline's, step 2 parts."""
    summary, output = planted_numerics
    assert summary.parameters == first[0].parameters | {"run_id": "lr-x100"}  # the workload key is left alone
    assert summary.losses[0] == first[0].losses[0] and abs(summary.losses[1] - first[0].losses[1]) > 0.02
    curve = _finding(summary, "losses")
    assert curve.status == "fail" and curve.detail.startswith("parts from it at step 2, step 2: ")
    assert summary.verdict == "fail" and summary.reason.startswith("loss curve regression: losses parts from it at "
                                                                   "step 2")


def test_a_run_in_the_lowest_lanes_venv_is_judged_in_the_band_lane_naming_the_packages(first, lowest):
    summary, output = lowest
    changed = stack_difference(first[0].stack, summary.stack)
    assert changed, "the lowest lane's venv has the same stack as the project's"
    curve = _finding(summary, "losses")
    assert curve.margin == 0.2 and curve.status == "pass", (curve.detail, output)
    assert (f"band lane: another environment than the baseline's ({len(changed)} package(s) differ: "
            f"{', '.join(changed[:6])}") in curve.detail
    assert summary.loss.tolerance == 0.2 and "band lane" in summary.loss.expectation_source


def test_a_planted_slowdown_is_flagged_1_of_2_then_fails_the_second_run_in_a_row_as_performance(node, first,
                                                                                                 slowed):
    from titanflow.record.history import read_history

    (one, out_one), (two, out_two) = slowed
    reference = first[0].train.tokens_per_s
    flagged, failed = _finding(one, "tokens_per_s"), _finding(two, "tokens_per_s")
    assert one.train.tokens_per_s < reference / 2 and two.train.tokens_per_s < reference / 2
    assert (flagged.status, flagged.streak, flagged.baseline) == ("flagged", "1 of 2", reference)
    assert one.verdict == "pass", out_one  # flagged, said, not failed
    assert (failed.status, failed.streak, failed.baseline) == ("fail", "2 of 2", reference)
    assert two.verdict == "fail" and two.reason.startswith("performance regression: tokens_per_s ")
    table = read_history(history_dir=node.history)
    classes = dict(zip(table.run_id, table.failure_class))
    assert classes["slow-2"] == "performance" and classes["lr-x100"] == "numerics"
    print(f"\ntokens/s: baseline {reference:.0f}, slowed {one.train.tokens_per_s:.0f} and "
          f"{two.train.tokens_per_s:.0f}; {json.dumps({r: classes[r] for r in sorted(classes)})}")
