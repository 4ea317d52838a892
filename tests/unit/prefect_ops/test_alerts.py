"""titanflow.prefect_ops.alerts without a server: which events the automations match (Prefect's own
server-side trigger matching), what the message says (the server's own template rendering), when the
nightly emits its regression event, and which settings are refused. The delivery through a real
server to a webhook is tests/e2e/test_alert_runs.py."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest

from titanflow.prefect_ops import alerts

FLOW_RUN_ID = UUID("3ecd94a5-05f5-462a-bda7-d57d3b9f737e")
BLOCK_ID = UUID("de61a470-eb8b-48ac-b7c5-56f16d006fd5")


def _server_trigger(automation):
    """The automation's trigger as the server evaluates it (prefect.server.events.schemas.automations)."""
    from prefect.server.events.schemas.automations import EventTrigger

    return EventTrigger.model_validate(automation.trigger.model_dump())


def _event(name: str, resource: dict, related: list[dict], payload: dict | None = None):
    from prefect.server.events.schemas.events import ReceivedEvent

    now = datetime.now(UTC)
    return ReceivedEvent(occurred=now, received=now, event=name, resource=resource, related=related,
                         payload=payload or {}, id=uuid4())


def _state_event(state: str, flow_name: str, message: str = ""):
    """A flow run's state-change event as the server emits it (prefect.server.models.events: every one has the
    ``prefect.state-message`` label, "" when the state has no message)."""
    return _event(f"prefect.flow-run.{state}",
                  {"prefect.resource.id": f"prefect.flow-run.{FLOW_RUN_ID}", "prefect.resource.name": "curly-newt",
                   "prefect.state-name": state, "prefect.state-message": message},
                  [{"prefect.resource.id": f"prefect.flow.{uuid4()}", "prefect.resource.role": "flow",
                    "prefect.resource.name": flow_name},
                   {"prefect.resource.id": "prefect.tag.suite:nightly", "prefect.resource.role": "tag"}])


def test_the_automations_watch_the_nightly_flow_as_flows_nightly_names_it():
    from titanflow.flows.nightly import qwen3_nightly

    assert qwen3_nightly.name == alerts.NIGHTLY_FLOW


def test_the_failed_automation_fires_on_a_nightly_ending_failed_crashed_or_timed_out_only():
    failed, _ = alerts.automations(BLOCK_ID)
    trigger = _server_trigger(failed)
    assert trigger.posture == "Reactive" and trigger.threshold == 1 and trigger.immediate  # one message per event
    for state in ("Failed", "Crashed", "TimedOut"):
        assert trigger.covers(_state_event(state, "qwen3-nightly")), state
    for state in ("Completed", "Cancelled", "Running"):
        assert not trigger.covers(_state_event(state, "qwen3-nightly")), state
    # the nightly's own scenario runs are subflows of another flow: their failures are the nightly's message
    assert not trigger.covers(_state_event("Failed", "qwen3-scenario"))


def test_a_nightly_interrupted_by_ctrl_c_does_not_alert_but_any_other_crash_does():
    # Prefect's engine sets Crashed with its own message before the flow's hook sets Cancelled
    # (titanflow.prefect_ops.stopped); the message is Prefect's wording, read from Prefect itself
    assert alerts.interrupted_message() == "Execution was aborted by an interrupt signal."
    trigger = _server_trigger(alerts.automations(BLOCK_ID)[0])
    assert not trigger.covers(_state_event("Crashed", "qwen3-nightly", alerts.interrupted_message()))
    for message in ("Execution was aborted by a termination signal.",  # a SIGTERM that was no Prefect cancel
                    "Execution was interrupted by an unexpected exception: MemoryError", ""):
        assert trigger.covers(_state_event("Crashed", "qwen3-nightly", message)), message
    assert trigger.covers(_state_event("Failed", "qwen3-nightly", "2 of 6 scenario runs failed (numerics)"))


def test_the_regression_automation_fires_on_the_event_the_nightly_emits_and_nothing_else():
    from prefect.states import Completed

    _, regression = alerts.automations(BLOCK_ID)
    trigger = _server_trigger(regression)
    emitted = alerts.regression_event("cpu", Completed(message="1 of 1 scenario runs passed; 2 regressions flagged"),
                                      2, FLOW_RUN_ID, "curly-newt")
    assert trigger.immediate
    assert trigger.covers(_event(emitted["event"], emitted["resource"], emitted["related"], emitted["payload"]))
    assert not trigger.covers(_state_event("Completed", "qwen3-nightly"))
    assert not trigger.covers(_state_event("Failed", "qwen3-nightly"))


def test_both_send_through_the_one_block_with_templates_the_server_accepts():
    from prefect.server.events.actions import SendNotification

    for automation in alerts.automations(BLOCK_ID):
        (action,) = automation.actions
        assert action.type == "send-notification" and action.block_document_id == BLOCK_ID
        SendNotification.model_validate(action.model_dump())  # the server's validation of the Jinja templates


def _render(template: str, context: dict) -> str:
    """``template`` rendered as the server's SendNotification action renders it, Prefect's filters included."""
    from prefect.server.events.actions import JinjaTemplateAction
    from prefect.server.utilities.user_templates import render_user_template_sync

    JinjaTemplateAction._register_filters_if_needed()
    return render_user_template_sync(template, context)


def test_the_failure_message_names_the_run_its_target_and_state_message_and_links_the_flow_run():
    from prefect.server.schemas.core import FlowRun
    from prefect.server.schemas.states import State, StateType
    from prefect.settings import PREFECT_UI_URL, temporary_settings

    message = "2 of 6 scenario runs failed (infrastructure, numerics); 1 flagged"  # flows/nightly.py suite_state
    flow_run = FlowRun(id=FLOW_RUN_ID, name="curly-newt", flow_id=uuid4(), parameters={"target": "cpu"},
                       state=State(type=StateType.FAILED, name="Failed", message=message))
    with temporary_settings({PREFECT_UI_URL: "http://127.0.0.1:4200"}):
        subject = _render(alerts.FAILED_SUBJECT, {"flow_run": flow_run})
        body = _render(alerts.FAILED_BODY, {"flow_run": flow_run})
    assert subject == "titanflow: nightly curly-newt Failed"
    assert body == (f"curly-newt (qwen3-nightly, target cpu) ended Failed: {message}\n"
                    f"flow run: http://127.0.0.1:4200/runs/flow-run/{FLOW_RUN_ID}")


def test_the_regression_message_says_how_many_were_flagged_and_links_the_flow_run():
    from prefect.server.schemas.core import FlowRun
    from prefect.settings import PREFECT_UI_URL, temporary_settings
    from prefect.states import Completed

    message = "6 of 6 scenario runs passed; 2 regressions flagged"  # flows/nightly.py suite_state
    emitted = alerts.regression_event("trn2", Completed(message=message), 2, FLOW_RUN_ID, "curly-newt")
    event = _event(emitted["event"], emitted["resource"], emitted["related"], emitted["payload"])
    flow_run = FlowRun(id=FLOW_RUN_ID, name="curly-newt", flow_id=uuid4())
    with temporary_settings({PREFECT_UI_URL: "http://127.0.0.1:4200"}):
        subject = _render(alerts.REGRESSION_SUBJECT, {"flow_run": flow_run, "event": event})
        body = _render(alerts.REGRESSION_BODY, {"flow_run": flow_run, "event": event})
    assert subject == "titanflow: nightly curly-newt flagged 2 regression(s)"
    assert body == (f"curly-newt (qwen3-nightly, target trn2) flagged 2 regression(s): {message}\n"
                    f"flow run: http://127.0.0.1:4200/runs/flow-run/{FLOW_RUN_ID}")
    # the action finds the flow run to render among the event's resources, as the server looks it up
    (related,) = event.related
    assert related.id == f"prefect.flow-run.{FLOW_RUN_ID}" and related.role == "flow-run"


def test_the_regression_event_is_emitted_only_for_a_nightly_that_flagged_and_did_not_fail():
    from prefect.states import Cancelled, Completed, Failed

    passed = Completed(message="6 of 6 scenario runs passed; 1 regressions flagged")
    assert alerts.regression_event("cpu", passed, 1, FLOW_RUN_ID, "n")["payload"] == {
        "target": "cpu", "flagged": 1, "message": passed.message}
    assert alerts.regression_event("cpu", Cancelled(message="c"), 1, FLOW_RUN_ID, "n") is not None
    assert alerts.regression_event("cpu", passed, 0, FLOW_RUN_ID, "n") is None  # nothing flagged
    assert alerts.regression_event("cpu", Failed(message="1 of 6 failed"), 3, FLOW_RUN_ID, "n") is None  # one alert
    assert alerts.regression_event("cpu", passed, 1, None, None) is None  # not inside a flow run: nothing to link


def test_the_nightly_concludes_with_the_suite_state_outside_a_flow_run_emitting_nothing():
    from titanflow.flows.nightly import conclude
    from titanflow.report.nightly import SuiteRow

    rows = [SuiteRow(scenario="native", init="random", run_id="r", verdict="pass", flagged=2)]
    state = conclude("cpu", rows)
    assert state.is_completed() and state.message == "1 of 1 scenario runs passed; 2 regressions flagged"
    assert alerts.emit_regression_alert("cpu", state, 2) is None  # no flow run here


def test_without_a_setting_alerts_are_off():
    assert alerts.alert_setting({}) is None
    assert alerts.alert_setting({alerts.WEBHOOK_ENV: "  "}) is None


def test_a_webhook_or_a_block_is_the_setting_and_is_described_without_the_webhook_path():
    setting = alerts.alert_setting({alerts.WEBHOOK_ENV: "https://hooks.slack.com/services/T0/B0/secret"})
    assert setting == alerts.AlertSetting(webhook_url="https://hooks.slack.com/services/T0/B0/secret")
    assert "secret" not in setting.describe() and "https://hooks.slack.com/..." in setting.describe()
    assert alerts.alert_setting({alerts.BLOCK_ENV: "slack-webhook/nightly"}) == alerts.AlertSetting(
        block="slack-webhook/nightly")


@pytest.mark.parametrize("environ, refusal", [
    ({alerts.WEBHOOK_ENV: "https://h/x", alerts.BLOCK_ENV: "slack-webhook/n"}, "are both set.*unset one"),
    ({alerts.WEBHOOK_ENV: "hooks.slack.com/services/x"}, "TITANFLOW_ALERT_WEBHOOK_URL=.*not an http"),
    ({alerts.WEBHOOK_ENV: "ftp://h/x"}, "TITANFLOW_ALERT_WEBHOOK_URL=.*not an http"),
    ({alerts.BLOCK_ENV: "nightly"}, "TITANFLOW_ALERT_BLOCK='nightly': expected <block-type-slug>/<name>"),
    ({alerts.BLOCK_ENV: "a/b/c"}, "TITANFLOW_ALERT_BLOCK='a/b/c': expected"),
])
def test_bad_settings_are_refused_naming_the_variable(environ, refusal):
    with pytest.raises(ValueError, match=refusal):
        alerts.alert_setting(environ)


def test_make_server_refuses_a_bad_alert_setting_before_starting_anything(tmp_path, monkeypatch):
    from titanflow.prefect_ops import server
    from titanflow.prefect_ops.local_server import ServerError

    monkeypatch.setenv(alerts.WEBHOOK_ENV, "hooks.example.com/nightly")
    with pytest.raises(ServerError, match="alerts: TITANFLOW_ALERT_WEBHOOK_URL='hooks.example.com/nightly': not an"):
        server.start(tmp_path, port=0)
    assert server.ServerState.load(tmp_path) is None and not (tmp_path / "server.log").exists()
