"""Alerts: a Prefect automation tells people when the nightly suite fails or flags a regression.

    TITANFLOW_ALERT_WEBHOOK_URL=https://hooks.example.com/nightly make server   # a webhook gets the alerts
    TITANFLOW_ALERT_BLOCK=slack-webhook/nightly make server                    # or a notification block

Everything here is Prefect's own: two automations (``prefect.automations.Automation``), each an
``EventTrigger`` and a ``SendNotification`` action through one notification block; the server's
trigger and action services evaluate them, so an alert goes out whoever ran the nightly (a
deployment on the cron, ``prefect deployment run``, ``titanflow nightly`` with ``PREFECT_API_URL``).

- :data:`FAILED_AUTOMATION` fires on ``prefect.flow-run.Failed`` (and ``Crashed``, ``TimedOut``: a
  nightly that ended without a verdict) of a run of the flow :data:`NIGHTLY_FLOW`; its subflows are
  ``qwen3-scenario`` runs and never match. Not on the Crashed of a nightly someone interrupted (Ctrl-C of
  ``titanflow nightly``), which Prefect's engine sets before the flow's hook turns it Cancelled
  (titanflow.prefect_ops.stopped): its event's ``prefect.state-message`` label is Prefect's own message for
  an interrupt, which the trigger excludes (:func:`interrupted_message`). The message: the run's name, target and final state
  message (how many scenario runs failed, their classes, how many regressions were flagged) and the
  link to the flow run in the UI.
- :data:`REGRESSION_AUTOMATION` fires on the event :data:`REGRESSION_EVENT`, which the nightly emits
  (:func:`emit_regression_alert`) when it ends without failing but flagged regressions (slower,
  larger, on fewer consecutive runs than fail one: "1 of 2"). A failed nightly does not emit it, so each nightly
  sends at most one message. An event of its own rather than a filter on ``prefect.flow-run.Completed``:
  the state message a trigger can match is one label of exact text, not the counts in it.

The block, first found: ``TITANFLOW_ALERT_BLOCK``, an existing notification block named
``<block-type-slug>/<name>`` (``slack-webhook/nightly``, ``sendgrid-email/nightly``: made once in
the UI or with ``SlackWebhook(url=...).save("nightly")``); else ``TITANFLOW_ALERT_WEBHOOK_URL``, for
which :func:`ensure_alerts` saves a ``CustomWebhookNotificationBlock`` named :data:`WEBHOOK_BLOCK`
that POSTs ``{"subject", "body", "text"}`` as JSON (``text`` is what Slack- and Mattermost-style
incoming webhooks read). With neither, alerts are off and the automations, if an earlier set-up made
them, are paused. Set-up is idempotent: the block is overwritten in place and each automation is
updated, never duplicated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit
from uuid import UUID

#: The flow the automations watch (flows/nightly.py's ``@flow(name=...)``; a unit test keeps them equal).
NIGHTLY_FLOW = "qwen3-nightly"
#: The event a nightly emits when it flagged regressions and did not fail.
REGRESSION_EVENT = "titanflow.nightly.regression"
FAILED_AUTOMATION = "titanflow: nightly failed"
REGRESSION_AUTOMATION = "titanflow: nightly flagged a regression"
#: The block document saved for ``TITANFLOW_ALERT_WEBHOOK_URL`` (type ``custom-webhook``).
WEBHOOK_BLOCK = "titanflow-nightly-alerts"
WEBHOOK_ENV = "TITANFLOW_ALERT_WEBHOOK_URL"
BLOCK_ENV = "TITANFLOW_ALERT_BLOCK"
#: Final states of a nightly that alert: Failed, and the two that end a run without a verdict.
FAILED_EVENTS = ("prefect.flow-run.Failed", "prefect.flow-run.Crashed", "prefect.flow-run.TimedOut")

# Jinja templates, rendered by the server's SendNotification action: ``flow_run`` is the run the
# triggering event names (its state taken from the event), ``event`` the event, ``ui_url`` Prefect's
# filter for an object's page in the UI (prefect.server.events.jinja_filters).
FAILED_SUBJECT = "titanflow: nightly {{ flow_run.name }} {{ flow_run.state.name }}"
FAILED_BODY = ("{{ flow_run.name }} (qwen3-nightly, target {{ flow_run.parameters.target }}) ended "
               "{{ flow_run.state.name }}: {{ flow_run.state.message }}\n"
               "flow run: {{ flow_run|ui_url }}")
REGRESSION_SUBJECT = "titanflow: nightly {{ flow_run.name }} flagged {{ event.payload.flagged }} regression(s)"
REGRESSION_BODY = ("{{ flow_run.name }} (qwen3-nightly, target {{ event.payload.target }}) flagged "
                   "{{ event.payload.flagged }} regression(s): {{ event.payload.message }}\n"
                   "flow run: {{ flow_run|ui_url }}")
#: What the webhook block POSTs; ``{{subject}}``/``{{body}}`` are the block's own placeholders,
#: filled with the action's rendered subject and body.
WEBHOOK_JSON = {"subject": "{{subject}}", "body": "{{body}}", "text": "{{subject}}\n{{body}}"}


@dataclass(frozen=True)
class AlertSetting:
    """Where alerts go: ``block`` (``<block-type-slug>/<name>`` of an existing notification block) or
    ``webhook_url``; exactly one is set."""

    webhook_url: str | None = None
    block: str | None = None

    def describe(self) -> str:
        """One line naming the destination; a webhook by scheme and host only (its path is often a secret)."""
        if self.block:
            return f"notification block {self.block}"
        url = urlsplit(self.webhook_url)
        return f"webhook {url.scheme}://{url.netloc}/... (block custom-webhook/{WEBHOOK_BLOCK})"


def alert_setting(environ: Mapping[str, str] = os.environ) -> AlertSetting | None:
    """The alert destination named by ``environ``; None when alerts are off (neither variable set).

    Raises:
        ValueError: both variables set, a webhook URL that is not http(s)://host..., or a block not
            written ``<block-type-slug>/<name>``; the message names the variable and the fix.
    """
    url, block = environ.get(WEBHOOK_ENV, "").strip(), environ.get(BLOCK_ENV, "").strip()
    if url and block:
        raise ValueError(f"{WEBHOOK_ENV} and {BLOCK_ENV} are both set; alerts go through one block: unset one")
    if block:
        slug, _, name = block.partition("/")
        if not slug or not name or "/" in name:
            raise ValueError(f"{BLOCK_ENV}={block!r}: expected <block-type-slug>/<name>, "
                             "e.g. slack-webhook/nightly (`prefect block ls` lists them)")
        return AlertSetting(block=block)
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{WEBHOOK_ENV}={url!r}: not an http(s) URL; e.g. https://hooks.slack.com/services/...")
        return AlertSetting(webhook_url=url)
    return None


def interrupted_message() -> str:
    """The message of the Crashed state Prefect's engine gives a flow run interrupted by Ctrl-C (a
    ``KeyboardInterrupt``), as Prefect itself words it (``prefect.states.exception_to_crashed_state``)."""
    from prefect.states import exception_to_crashed_state
    from prefect.utilities.asyncutils import run_coro_as_sync

    return run_coro_as_sync(exception_to_crashed_state(KeyboardInterrupt())).message


def automations(block_document_id: UUID) -> list:
    """The two automations (``prefect.automations.Automation``, not yet created) sending through
    the block document ``block_document_id`` (module docstring)."""
    from prefect.automations import Automation, EventTrigger, Posture, SendNotification

    failed = Automation(
        name=FAILED_AUTOMATION,
        description=f"One message when a {NIGHTLY_FLOW} flow run ends Failed, Crashed or TimedOut "
                    "(titanflow.prefect_ops.alerts)",
        # "!": Prefect's negation of a label's value; the server gives every flow-run state event this label ("" for
        # a state without a message), so only the interrupt's Crashed is left out
        trigger=EventTrigger(expect=set(FAILED_EVENTS), match={"prefect.resource.id": "prefect.flow-run.*",
                                                               "prefect.state-message": f"!{interrupted_message()}"},
                             match_related={"prefect.resource.role": "flow", "prefect.resource.name": NIGHTLY_FLOW},
                             for_each={"prefect.resource.id"}, posture=Posture.Reactive, threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_document_id, subject=FAILED_SUBJECT, body=FAILED_BODY)])
    regression = Automation(
        name=REGRESSION_AUTOMATION,
        description=f"One message when a {NIGHTLY_FLOW} flow run flags regressions without failing "
                    f"(the event {REGRESSION_EVENT}; titanflow.prefect_ops.alerts)",
        trigger=EventTrigger(expect={REGRESSION_EVENT}, for_each={"prefect.resource.id"}, posture=Posture.Reactive,
                             threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_document_id, subject=REGRESSION_SUBJECT,
                                  body=REGRESSION_BODY)])
    return [failed, regression]


def _block_document_id(client, setting: AlertSetting) -> UUID:
    """The notification block's document id: the named block, or the webhook block saved (overwritten) now.

    Raises:
        ValueError: the named block does not exist on this server, or cannot send notifications.
    """
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.exceptions import ObjectNotFound

    if setting.webhook_url:
        block = CustomWebhookNotificationBlock(name="titanflow nightly", url="{{url}}", json_data=WEBHOOK_JSON,
                                               secrets={"url": setting.webhook_url})  # the URL kept as a secret
        return block.save(WEBHOOK_BLOCK, overwrite=True)
    slug, _, name = setting.block.partition("/")
    try:
        document = client.read_block_document_by_name(name=name, block_type_slug=slug, include_secrets=False)
    except ObjectNotFound:
        raise ValueError(f"{BLOCK_ENV}={setting.block!r}: no such block on this server; create it in the UI "
                         "(Blocks > +) or with e.g. SlackWebhook(url=...).save('nightly')") from None
    if "notify" not in (document.block_schema.capabilities if document.block_schema else []):
        raise ValueError(f"{BLOCK_ENV}={setting.block!r}: a {slug} block cannot send notifications; "
                         "name a notification block (slack-webhook, sendgrid-email, custom-webhook, ...)")
    return document.id


def ensure_alerts(api_url: str, environ: Mapping[str, str] = os.environ) -> str:
    """Set up the alert automations on the server at ``api_url`` as ``environ`` says (module docstring).

    Each automation is created, or updated in place when one of its name exists (any further ones of
    that name are deleted); without a setting, existing ones are paused. Returns one line for the
    user: where alerts go, or that they are off and how to turn them on.

    Raises:
        ValueError: a bad setting (:func:`alert_setting`) or a named block that is missing or not a
            notification block.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    setting = alert_setting(environ)
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        if setting is None:
            paused = [found for name in (FAILED_AUTOMATION, REGRESSION_AUTOMATION)
                      for found in client.read_automations_by_name(name) if found.enabled]
            for found in paused:
                client.pause_automation(found.id)
            return (f"off: set {WEBHOOK_ENV} (a webhook URL) or {BLOCK_ENV} (<block-type-slug>/<name>) and run "
                    f"make server again" + (f"; paused {len(paused)} automation(s)" if paused else ""))
        block_id = _block_document_id(client, setting)
        for automation in automations(block_id):
            found = client.read_automations_by_name(automation.name)
            if found:
                automation.id = found[0].id
                automation.update()
                for extra in found[1:]:
                    client.delete_automation(extra.id)
            else:
                automation.create()
    return f"on: {setting.describe()}; automations {FAILED_AUTOMATION!r}, {REGRESSION_AUTOMATION!r}"


def regression_event(target: str, state, flagged: int, flow_run_id: UUID | str | None,
                     flow_run_name: str | None) -> dict | None:
    """The ``prefect.events.emit_event`` arguments for a nightly of ``target`` that ended in ``state``
    (a Prefect State) with ``flagged`` regressions; None when there is nothing to alert apart (nothing
    flagged, or the nightly failed: the failed-nightly alert says it) or no flow run to link.

    The event's resource is the suite (``titanflow.nightly.<target>``), the flow run a related
    resource, so the action's ``flow_run`` and its UI link are this run.
    """
    if flagged < 1 or state.is_failed() or state.is_crashed() or flow_run_id is None:
        return None
    return {"event": REGRESSION_EVENT,
            "resource": {"prefect.resource.id": f"titanflow.nightly.{target}",
                         "prefect.resource.name": f"nightly-{target}"},
            "related": [{"prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
                         "prefect.resource.role": "flow-run", "prefect.resource.name": flow_run_name or ""}],
            "payload": {"target": target, "flagged": flagged, "message": state.message or ""}}


def emit_regression_alert(target: str, state, flagged: int):
    """Emit :data:`REGRESSION_EVENT` for the current flow run when :func:`regression_event` says so;
    returns the emitted event, or None (nothing to alert, or no Prefect server to send it to)."""
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    arguments = regression_event(target, state, flagged, flow_run.id, flow_run.name)
    return emit_event(**arguments) if arguments else None
