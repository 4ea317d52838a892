"""Alerts end to end: `make server` (titanflow.prefect_ops.server.start) sets the automations up on a real
Prefect server, whose own trigger and action services send through the webhook block to a receiver
on 127.0.0.1 started here: exactly one message for a failed nightly, none for a passing one, one for
a nightly that flagged a regression."""

from __future__ import annotations

import time
from pathlib import Path

from helpers.webhook import webhook_receiver


def test_a_failed_nightly_alerts_once_a_passing_one_never_and_a_flagged_regression_once(deployed, tmp_path,
                                                                                      monkeypatch):
    from helpers.deployment_runs import run_deployment, state_times
    from helpers.run_processes import wait_until
    from prefect import flow
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.events.worker import EventsWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from titanflow.flows.nightly import conclude
    from titanflow.prefect_ops import alerts, server
    from titanflow.report.nightly import SuiteRow

    api, home = deployed.api_url, Path(deployed.home)
    with webhook_receiver() as (url, received):
        monkeypatch.setenv(alerts.WEBHOOK_ENV, url)
        try:
            # `make server` run twice against the running server: the second sets up nothing new
            first, again = server.start(home), server.start(home)
            assert first.api_url == again.api_url == api
            assert again.alerts.startswith(f"on: webhook {url.removesuffix('/nightly-alerts')}/... (block custom-webhook/")
            with SyncPrefectClient(api) as client:
                for name in (alerts.FAILED_AUTOMATION, alerts.REGRESSION_AUTOMATION):
                    (automation,) = client.read_automations_by_name(name)
                    assert automation.enabled
                blocks = client.read_block_documents(include_secrets=False)
                assert [b.name for b in blocks if b.name == alerts.WEBHOOK_BLOCK] == [alerts.WEBHOOK_BLOCK]

            # 1. a failed nightly, as the cron starts it: the nightly-cpu deployment on the worker; steps=0 is
            #    refused (ScenarioRun) before anything trains, which fails the suite
            run = run_deployment(api, "qwen3-nightly/nightly-cpu", "steps=0", f"runs_dir={tmp_path}")
            assert run.returncode == 1 and run.flow_run_id is not None, run.output[-3000:]
            wait_until(lambda: len(received) >= 1, 60, "the failed nightly's alert")
            with SyncPrefectClient(api) as client:
                failed = client.read_flow_run(run.flow_run_id)
            latency_s = received[0]["at"] - state_times(api, run.flow_run_id)["Failed"]
            assert failed.state.is_failed() and "steps" in failed.state.message  # the refused field, named
            link = f"{deployed.ui_url}/runs/flow-run/{run.flow_run_id}"
            assert received[0]["json"] == {
                "subject": f"titanflow: nightly {failed.name} Failed",
                "body": f"{failed.name} (qwen3-nightly, target cpu) ended Failed: {failed.state.message}\nflow run: {link}",
                "text": f"titanflow: nightly {failed.name} Failed\n"
                        f"{failed.name} (qwen3-nightly, target cpu) ended Failed: {failed.state.message}\n"
                        f"flow run: {link}"}
            assert (received[0]["method"], received[0]["path"], received[0]["content_type"]) == (
                "POST", "/nightly-alerts", "application/json")

            # 2. a passing nightly and 3. one that flagged two regressions: the nightly's own last step
            #    (titanflow.flows.nightly.conclude) on rows of runs that passed, in a flow run named as the nightly's
            @flow(name=alerts.NIGHTLY_FLOW)
            def nightly_ending(flagged: int):
                return conclude("cpu", [SuiteRow(scenario="native", init="random", run_id="r", verdict="pass",
                                                 flagged=flagged)])

            with temporary_settings({PREFECT_API_URL: api}):
                passed = nightly_ending(0, return_state=True)
                flagged = nightly_ending(2, return_state=True)
                # the in-process flows started Prefect's events worker on this server's URL; drain and stop it,
                # or later in-process flows of the session send their events (task runs included) here
                EventsWorker.drain_all()
            assert passed.is_completed() and flagged.is_completed()
            wait_until(lambda: len(received) >= 2, 60, "the flagged nightly's alert")
            time.sleep(max(5.0, 3 * latency_s))  # a message for the passing run would have come by now
            assert len(received) == 2, [m["json"]["subject"] for m in received]
            flagged_id = flagged.state_details.flow_run_id
            with SyncPrefectClient(api) as client:
                flagged_name = client.read_flow_run(flagged_id).name
            assert received[1]["json"]["subject"] == f"titanflow: nightly {flagged_name} flagged 2 regression(s)"
            assert received[1]["json"]["body"] == (
                f"{flagged_name} (qwen3-nightly, target cpu) flagged 2 regression(s): "
                f"1 of 1 scenario runs passed; 2 regressions flagged\n"
                f"flow run: {deployed.ui_url}/runs/flow-run/{flagged_id}")
            print(f"\nalert of the failed nightly: {latency_s:.1f} s after its Failed state; "
                  f"the flagged one's {received[1]['at'] - state_times(api, flagged_id)['Completed']:.1f} s "
                  f"from its Completed state; deployment run wall {run.wall_s:.1f} s")
        finally:
            monkeypatch.delenv(alerts.WEBHOOK_ENV)
            off = server.start(home)  # `make server` without a setting: alerts off, the automations paused
    assert off.alerts.startswith("off: set TITANFLOW_ALERT_WEBHOOK_URL") and "paused 2 automation(s)" in off.alerts
    with SyncPrefectClient(api) as client:
        assert not any(a.enabled for name in (alerts.FAILED_AUTOMATION, alerts.REGRESSION_AUTOMATION)
                       for a in client.read_automations_by_name(name))
