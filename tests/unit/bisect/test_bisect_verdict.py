"""A probe's run as git bisect's good, bad or skip (titanflow.bisect.verdict), on runs judged by titanflow's own
rules: the passing 10-step native run and the same run at lr 3e-3, as measured (helpers/bisect_runs.py)."""

import pytest
from helpers import FIXTURES
from helpers.bisect_runs import judged_summary, planted_losses

from titanflow.bisect.verdict import BisectRefused, Check, failed_checks, learn_check, probe_verdict
from titanflow.record.summary import Cancellation, read_summary
from titanflow.results import LossVerdict

#: What the planted run fails: titanflow's numerics class, and the golden_curve rule on its losses.
PLANTED_CHECK = Check(failure_class="numerics", check="golden_curve losses")


@pytest.fixture()
def passing(tmp_path):
    return judged_summary(tmp_path / "pass")


@pytest.fixture()
def planted(tmp_path):
    return judged_summary(tmp_path / "planted", planted_losses())


def test_the_bad_run_names_its_class_and_first_failed_check(planted):
    assert failed_checks(planted) == ["golden_curve losses"]
    assert learn_check(planted) == PLANTED_CHECK
    assert str(PLANTED_CHECK) == "golden_curve losses (numerics)"


def test_a_passing_run_is_good_and_the_same_failure_bad(passing, planted):
    assert probe_verdict(passing, "", PLANTED_CHECK) == ("good", None, [])
    assert probe_verdict(planted, "", PLANTED_CHECK) == ("bad", "numerics", ["golden_curve losses"])


def test_another_check_of_the_same_class_is_a_skip():
    """The --lr 1e6 run (tests/fixtures/run_folders/native-cpu-nan): class numerics too, but its train task raised
    at the NaN: it says nothing about the golden curve."""
    nan = read_summary(FIXTURES / "run_folders" / "native-cpu-nan" / "summary.json")
    assert probe_verdict(nan, "", PLANTED_CHECK) == ("skip", "numerics", ["task train"])


def test_the_same_check_in_another_class_is_a_skip(planted):
    """A run that failed the golden curve but whose log shows a killed rank is infrastructure (failures.py: its
    signals come first): another reason, so a skip."""
    verdict, failure_class, checks = probe_verdict(planted, "Signal 9 (SIGKILL) received by PID 12", PLANTED_CHECK)
    assert (verdict, failure_class, checks) == ("skip", "infrastructure", ["golden_curve losses"])


def test_a_crash_without_summary_and_a_cancelled_run_are_skips(planted):
    assert probe_verdict(None, "", PLANTED_CHECK) == ("skip", None, [])
    cancelled = planted.model_copy(update={"verdict": "cancelled", "cancelled": Cancellation(
        cause="interrupted (Ctrl-C)", task="train", losses=[])})
    assert probe_verdict(cancelled, "", PLANTED_CHECK)[0] == "skip"


def test_no_check_known_yet_makes_no_run_bad(planted):
    assert probe_verdict(planted, "", None) == ("skip", "numerics", ["golden_curve losses"])


def test_checks_are_listed_as_the_verdict_weighs_them(planted):
    out_of_band = LossVerdict(first_step_loss=12.5, expected_first_step_loss=11.944, tolerance=0.15,
                              expectation_source="derived", verdict="fail", reason="out of band")
    both = planted.model_copy(update={"loss": out_of_band, "failed_task": "validate"})
    assert failed_checks(both) == ["task validate", "compare_loss", "golden_curve losses"]


def test_a_bad_revision_that_passes_or_crashed_is_refused(passing):
    with pytest.raises(BisectRefused, match=r"^bad: its run ended pass \(.*\); nothing to bisect"):
        learn_check(passing)
    with pytest.raises(BisectRefused, match=r"^bad: its run ended without a summary.json \(exit 1; boom\)"):
        learn_check(None, why="exit 1; boom")
