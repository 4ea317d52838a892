"""The torchtitan window's lanes: each snapshot of upstream (tests/upstream/overlays.py) and the 0.3.0 release of the
cpu venv, held to the table of docs/trn2-walkthrough.md ("The torchtitan window"): every scenario renders, or is
refused naming the changes of titan_cfg/window.py the cell names, for the cpu and trn2 targets in both modes;
doctor's upstream check (titan_cfg.window.report, what its Python prints) agrees; and each scenario that works is
trained (walkthrough mode, one rank, 2 steps: tests/upstream/lane.py) on its golden's first steps.

A snapshot missing from the snapshot folder skips its lane with a message saying where it was looked for. 0.3.0's
lane trains nothing: tests/e2e/test_walkthrough_mode.py and test_scenarios.py train it in full.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from titan_cfg import window
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS
from titanflow.judge.goldens import golden_for
from titanflow.judge.regression import load_rules
from titanflow.paths import REPO_ROOT
from titanflow.run.pretrained import embedded_weights

sys.path.insert(0, str(Path(__file__).parent))
import overlays  # noqa: E402  (this folder's installer)

#: One worker runs every lane (``--dist loadgroup``), so each lane's training runs once.
pytestmark = pytest.mark.xdist_group("upstream-lanes")

LANE = Path(__file__).parent / "lane.py"
TABLE_TITLE = "| point | native config |"
RELEASE = "0.3.0"  # the cpu venv's own torchtitan: no overlay


def table() -> dict[str, dict[tuple[str, str], list[str]]]:
    """``{point: {(scenario, mode): [the changes that refuse it]}}`` (``[]``: works) from the docs' table."""
    lines = (REPO_ROOT / "docs" / "trn2-walkthrough.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_TITLE))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")][1:]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        point, *cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[point] = {tuple(column.split()): ([] if cell == "works" else cell.removeprefix("refused: ").split(", "))
                       for column, cell in zip(header, cells)}
    return rows


TABLE = table()


@pytest.fixture(scope="module", params=list(TABLE))
def lane(request, tmp_path_factory) -> tuple[str, dict]:
    """(point, tests/upstream/lane.py's answer) for one point of the table, its overlay first on the path."""
    point = request.param
    path = [str(REPO_ROOT)]
    if point != RELEASE:
        archive = overlays.snapshots().get(point)
        if archive is None:
            pytest.skip(f"the torchtitan snapshot of {point} is not in {overlays.snapshot_folder()} (make test-upstream "
                        "UPSTREAM_SNAPSHOTS=<folder>, or $TITANFLOW_UPSTREAM_SNAPSHOTS, names the folder of "
                        "torchtitan-<date>-<commit>.tar.gz): lane skipped")
        path.insert(0, str(overlays.install(archive)))
    rows = TABLE[point]
    train = [s for s in SCENARIOS if not rows[(s, "walkthrough")]] if point != RELEASE else []
    out = tmp_path_factory.mktemp(f"lane-{point}")
    done = subprocess.run([sys.executable, str(LANE), str(out), "--train", ",".join(train)], capture_output=True,
                          text=True, timeout=1800, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    assert done.returncode == 0, done.stderr[-4000:]
    return point, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def release_rows(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """``{scenario: {mode: {"input": [B, L], "labels": [B, L], "positions": [B, L] where the batch has them}}}``: the
    first batch torchtitan 0.3.0's text loader (the cpu venv's) gives each scenario's lane job in both modes
    (tests/upstream/lane.py ``--rows``: the loader alone, no model)."""
    out = tmp_path_factory.mktemp("rows-0.3.0")
    done = subprocess.run([sys.executable, str(LANE), str(out), "--rows"], capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    paths = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
    return {s: {mode: torch.load(path, weights_only=True) for mode, path in modes.items()} for s, modes in paths.items()}


def _packed_positions(rows: int, seq_len: int) -> torch.Tensor:
    """The packed row's positions of ``rows`` rows: 0..seq_len-1 each."""
    return torch.arange(seq_len).repeat(rows, 1)


def test_the_table_covers_every_scenario_mode_and_snapshot():
    assert {key for row in TABLE.values() for key in row} == {(s, m) for s in SCENARIOS
                                                              for m in ("config", "walkthrough")}
    assert set(overlays.snapshots()) <= set(TABLE), "a snapshot without its row in docs/trn2-walkthrough.md"
    assert set(window.CHECKED_ON) == set(TABLE)
    assert {key for row in TABLE.values() for keys in row.values() for key in keys} <= {c.key for c in window.CHANGES}


def test_every_render_works_or_is_refused_as_the_table_says(lane):
    point, found = lane
    for (scenario, mode), keys in TABLE[point].items():
        for target in ("cpu", "trn2"):
            got = found["renders"][scenario][f"{target}/{mode}"]
            if not keys:
                assert got == "works", (point, scenario, mode, target, got)
            else:  # an environment failure naming each change with its date, never bad input
                assert got.startswith(f"WindowError: this torchtitan cannot serve the {scenario} scenario: "), got
                assert [line for line in (window.change(k).refusal() for k in keys) if line not in got] == []


def test_doctors_upstream_check_refuses_exactly_what_the_table_refuses(lane):
    point, found = lane
    for scenario, row in found["window"]["scenarios"].items():
        keys = TABLE[point][(scenario, "config")]
        assert row["refusals"] == [window.change(k).refusal() for k in keys], (point, scenario)
        if not keys:
            assert row["missing"] == {}, (point, scenario)
    assert found["distribution"][0] == "torchtitan" and found["window"]["position"].startswith("resembles upstream")


def test_each_scenario_that_works_trains_its_first_steps_on_the_golden(lane, release_rows):
    """Step 1 (the loss before any update: the model's init and the first batch) within the golden_curve rule's
    margin of the golden's step 1; step 2 (after one update, whose learning rate a 2-step run's warm-up sets
    otherwise than the golden's 10 steps) within its band. Step 1's batch, as the rank recorded it, holds the very
    token ids and labels 0.3.0's text loader gives the same job (a Grain base's loader included), and each row of
    the packed row trains over positions 0..L-1 where the loader's positions reach the model."""
    point, found = lane
    (rule,) = [r for r in load_rules().rules if r.kind == "golden_curve"]
    for scenario, trained in found["trained"].items():
        assert isinstance(trained, dict), (point, scenario, trained)
        losses = trained["losses"]
        assert len(losses) == 2 and all(map(math.isfinite, losses)), (point, losses)
        # rank 0 recorded the torchtitan it trained with: the snapshot, where doctor places it in the window
        assert trained["install"]["position"] == found["window"]["position"]
        assert trained["install"]["distributions"] == {"torchtitan": found["distribution"][1]}
        assert trained["install"]["weights"]["safetensors_files"] == 1 and trained["install"]["seed"] == 0
        # and which kernel torch's SDPA takes on its device for the run's attention (the embedded model's heads and
        # head_dim, the cpu target's 256 tokens, fp32 end to end there): CPU's own flash attention
        sdpa, model = trained["install"]["sdpa"], json.loads(
            (embedded_weights("random", SCENARIOS[scenario].model_type) / "config.json").read_text())
        assert (sdpa["device"], sdpa["shape"], sdpa["dtype"]) == (
            "cpu", [1, model["num_attention_heads"], TARGETS["cpu"]().seq_len, model["head_dim"]], "float32"), sdpa
        assert (sdpa["kernel"], sdpa["fused"]) == ("_scaled_dot_product_flash_attention_for_cpu", True), sdpa
        # every point of the window here yields per-document positions (from 2026-03-18); the packed row drops them
        assert trained["loader_positions"] is True
        record = torch.load(trained["first_batch"], weights_only=True)
        (micro,) = record["microbatches"]  # one rank, one microbatch: the whole step
        # a Grain base's loader is titanflow's (titan_cfg.grain_loader): 0.3.0's rows; an earlier base's text loader
        # is upstream's own, which cut the token stream in windows of seq_len + 1 (docs: a difference by design)
        same, release = found["window"]["present"]["grain"], release_rows[scenario]["walkthrough"]
        assert torch.equal(micro["input"], release["input"]) is same, (point, scenario)
        assert torch.equal(micro["labels"], release["labels"]) is same, (point, scenario)
        if "positions" in micro:  # a Grain base: the packed row's positions, each row on its own
            assert torch.equal(micro["positions"], _packed_positions(*micro["input"].shape)), (point, scenario)
        golden = (golden_for(scenario, "cpu", "random", None, model_spec="walkthrough")
                  or golden_for(scenario, "cpu", "random", None))  # hf_backend: the default mode's (docs)
        first = [golden.losses[1], golden.losses[2]]
        assert abs(losses[0] - first[0]) <= rule.margin, (point, scenario, losses, first)
        assert abs(losses[1] - first[1]) <= rule.band, (point, scenario, losses, first)


def test_a_grain_base_gives_each_scenario_the_rows_and_positions_of_0_3_0s_loader(lane, release_rows):
    """On a Grain base (titanflow's own loader, titan_cfg.grain_loader) the loader's first batch of each scenario's
    job equals 0.3.0's text loader's in both modes: token ids, labels, and in the default mode the per-document
    positions restarted at each row; the packed row (walkthrough mode), whose 0.3.0 batch carries no positions, gets
    0..L-1 in each row. An earlier base's loader is upstream's own: nothing is built."""
    point, found = lane
    if not found["window"]["present"]["grain"]:
        assert found["rows"] == {}, point
        return
    assert set(found["rows"]) == set(SCENARIOS)
    for scenario, modes in found["rows"].items():
        for mode, path in modes.items():
            got, release = torch.load(path, weights_only=True), release_rows[scenario][mode]
            assert torch.equal(got["input"], release["input"]), (point, scenario, mode)
            assert torch.equal(got["labels"], release["labels"]), (point, scenario, mode)
            want = release["positions"] if "positions" in release else _packed_positions(*got["input"].shape)
            assert torch.equal(got["positions"], want), (point, scenario, mode)


def test_titanflow_render_on_a_base_it_cannot_serve_exits_3_as_an_environment_failure(tmp_path):
    """The earliest snapshot (before torchtitan's Qwen3 layer builders) as a user meets it: ``titanflow render`` says
    ``environment``, not bad input, and exits 3 (bad input exits 2), leaving no run folder behind."""
    archive = overlays.snapshots().get("2026-02-23")
    if archive is None:
        pytest.skip(f"the torchtitan snapshot of 2026-02-23 is not in {overlays.snapshot_folder()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlays.install(archive)), str(REPO_ROOT)])}
    done = subprocess.run([str(Path(sys.executable).parent / "titanflow"), "render", "native", "--target", "cpu",
                           "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "titanflow: environment:\nthis torchtitan cannot serve the native scenario: missing: " in done.stderr
    assert list(tmp_path.iterdir()) == []
