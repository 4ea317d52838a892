"""The walkthrough's numbers as data (titan_cfg/published_expectations.toml) and how the loss verdict
uses them: 6.54 for the published Qwen/Qwen3-4B-Instruct-2507 weights and 12.43 from random init, scenario 1
on trn2 (AWS walkthrough "Train Qwen3 on AWS Trainium with torchtitan"); the weights id they are keyed by."""

import json
import shutil

import pytest
from helpers import FIXTURES
from helpers.walkthrough import INSTRUCT, WALKTHROUGH

from titan_cfg.job import PublishedFirstStep
from titan_cfg.model_spec import qwen3_shape
from titan_cfg.published import (
    Workload,
    load_published,
    published_for,
    published_for_job,
)
from titanflow.judge.expected_loss import random_init_first_step_loss
from titanflow.judge.loss import judge
from titanflow.params import ScenarioRun
from titanflow.results import IndependentLoss
from titanflow.weights.identity import weights_id



def test_the_table_holds_the_walkthroughs_two_figures_with_their_source_and_band():
    table = load_published().expectation
    assert {(e.scenario, e.target, e.init, e.weights_id, e.first_step_loss) for e in table} == {
        ("hf_backend", "trn2", "pretrained", INSTRUCT, 6.54), ("hf_backend", "trn2", "random", INSTRUCT, 12.43)}
    for entry in table:
        assert "Train Qwen3 on AWS Trainium with torchtitan" in entry.source and entry.band > 0
        assert entry.workload == WALKTHROUGH


def test_only_the_exact_key_finds_a_figure():
    assert published_for("hf_backend", "trn2", "pretrained", INSTRUCT).first_step_loss == 6.54
    assert published_for("native", "trn2", "pretrained", INSTRUCT) is None  # the walkthrough states none
    assert published_for("hf_backend", "cpu", "pretrained", INSTRUCT) is None
    assert published_for("hf_backend", "trn2", "pretrained", "Qwen/Qwen3-4B") is None  # other weights
    assert published_for("hf_backend", "trn2", "pretrained", None) is None


def test_the_derived_random_init_loss_of_instruct_2507_agrees_with_the_published_12_43():
    """ln 151936 + 0.97334 / 2 = 12.418 (the transformers backend's lm_head init), 0.012 from 12.43."""
    shape = qwen3_shape(FIXTURES / "qwen3-4b-instruct-2507")
    derived = random_init_first_step_loss(shape.vocab_size, shape.hidden_size, "trunc_normal_inv_sqrt_hidden")
    published = published_for("hf_backend", "trn2", "random", INSTRUCT)
    assert derived == pytest.approx(12.418, abs=5e-4) and abs(derived - published.first_step_loss) <= published.band


def test_the_job_records_the_figure_as_expectation_only_on_its_workload():
    on = published_for_job("hf_backend", "trn2", "pretrained", INSTRUCT, WALKTHROUGH)
    assert (on.first_step_loss, on.band, on.role, on.workload_differences) == (6.54, 0.05, "expectation", [])
    off = published_for_job("hf_backend", "trn2", "pretrained", INSTRUCT, WALKTHROUGH.model_copy(update={"seq_len": 4096}))
    assert off.role == "beside" and off.workload_differences == ["seq_len 4096 (published: 2048)"]
    assert published_for_job("hf_backend", "trn2", "random", INSTRUCT, WALKTHROUGH).role == "beside"


@pytest.mark.parametrize(("old", "new", "message"), [
    ('scenario = "hf_backend"', 'scenario = "dense"', "expectation.0.scenario: unknown scenario 'dense'"),
    ("band = 0.05", "band = 0", "expectation.0.band"),
    ("first_step_loss = 6.54", "first_step_loss = nan", "expectation.0.first_step_loss"),
])
def test_a_bad_entry_fails_on_load_naming_it(tmp_path, old, new, message):
    from titan_cfg.published import PUBLISHED_FILE

    path = tmp_path / "published.toml"
    path.write_text(PUBLISHED_FILE.read_text().replace(old, new, 1))
    with pytest.raises(ValueError, match=message):
        load_published(path)


def test_two_entries_for_one_key_are_refused(tmp_path):
    from titan_cfg.published import PUBLISHED_FILE

    text = PUBLISHED_FILE.read_text()
    first = text[text.index("[[expectation]]"):text.index("[[expectation]]", text.index("[[expectation]]") + 1)]
    path = tmp_path / "published.toml"
    path.write_text(text + "\n" + first)
    with pytest.raises(ValueError, match="more than one entry"):
        load_published(path)


# -- the weights id --------------------------------------------------------------------------------------


def test_weights_id_from_a_hub_id_a_hub_cache_snapshot_and_name_or_path(tmp_path):
    assert weights_id(INSTRUCT, tmp_path) == INSTRUCT
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-4B-Instruct-2507" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert weights_id(str(snapshot), snapshot) == INSTRUCT
    assert weights_id(None, FIXTURES / "qwen3-4b-instruct-2507") == INSTRUCT  # its config.json's _name_or_path


def test_weights_of_unknown_origin_have_no_id(tmp_path, tiny_assets):
    assert weights_id(None, tiny_assets.weights_dir) is None
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "/home/me/checkpoints/step-100"}))
    assert weights_id(str(folder), folder) is None  # a path is not an id


def test_a_hub_id_resolves_to_the_nodes_own_copy_named_by_titanflow_weights_root(tmp_path, monkeypatch):
    from titanflow.weights.resolve import WEIGHTS_ROOT_ENV, resolve_weights

    local = tmp_path / "models" / INSTRUCT
    local.parent.mkdir(parents=True)
    shutil.copytree(FIXTURES / "qwen3-4b-instruct-2507", local)
    monkeypatch.setenv(WEIGHTS_ROOT_ENV, str(tmp_path / "models"))
    assert resolve_weights(INSTRUCT) == local  # HF_HUB_OFFLINE=1 (tests/conftest.py): no download tried
    assert weights_id(INSTRUCT, local) == INSTRUCT


# -- the verdict -----------------------------------------------------------------------------------------


@pytest.fixture()
def shape():
    return qwen3_shape(FIXTURES / "qwen3-4b-instruct-2507")


def _trn2(init: str) -> ScenarioRun:
    return ScenarioRun(scenario="hf_backend", target="trn2", init=init, weights=INSTRUCT)


def _figure(init: str, workload: Workload = WALKTHROUGH) -> PublishedFirstStep:
    return published_for_job("hf_backend", "trn2", init, INSTRUCT, workload)


def test_pretrained_published_weights_are_held_to_6_54_within_its_band(shape):
    passed = judge([6.57, 6.1], shape, _trn2("pretrained"), published=_figure("pretrained"))
    assert passed.verdict == "pass" and (passed.expected_first_step_loss, passed.tolerance) == (6.54, 0.05)
    assert passed.expectation_source.startswith("published: AWS walkthrough")
    failed = judge([6.62], shape, _trn2("pretrained"), published=_figure("pretrained"))
    assert failed.verdict == "fail" and "|6.6200 - 6.5400| = 0.0800 > 0.05" in failed.reason


def test_pretrained_weights_that_did_not_load_fail_whatever_the_figure(shape):
    verdict = judge([12.4], shape, _trn2("pretrained"), published=_figure("pretrained"))
    assert verdict.verdict == "fail" and "were the weights loaded?" in verdict.reason


def test_random_init_is_judged_by_the_derived_value_with_12_43_beside(shape):
    verdict = judge([12.45], shape, _trn2("random"), published=_figure("random"))
    assert verdict.verdict == "pass" and verdict.expected_first_step_loss == pytest.approx(12.418, abs=5e-4)
    assert verdict.expectation_source.startswith("derived") and "published 12.43 beside it" in verdict.expectation_source
    assert verdict.published.first_step_loss == 12.43


def test_another_workload_reports_the_figure_and_is_held_to_the_gap(shape):
    figure = _figure("pretrained", WALKTHROUGH.model_copy(update={"seq_len": 4096}))
    verdict = judge([6.9], shape, _trn2("pretrained"), published=figure)
    assert verdict.verdict == "pass" and "the gap alone" in verdict.reason
    assert "not its workload: seq_len 4096 (published: 2048)" in verdict.expectation_source


def test_the_independent_expectation_goes_before_a_published_figure(shape):
    independent = IndependentLoss(loss=6.6012, tokens=131072, forwards=64, ranks=64, seconds=90.0)
    verdict = judge([6.60122], shape, _trn2("pretrained"), independent=independent, published=_figure("pretrained"))
    assert verdict.verdict == "pass" and verdict.expected_first_step_loss == 6.6012
    assert "published 6.54 beside it" in verdict.expectation_source
