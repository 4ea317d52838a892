"""The settings titanflow's correctness depends on live in the repository's prefect.toml, so any process
started from the repository root gets them, whatever started it (make server, a supervisor, a hand)."""

import json
import os
import subprocess
import sys

from titanflow.paths import REPO_ROOT


def _settings_seen_from(cwd) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # as a bare shell has it
    probe = ("import json; from prefect.settings import get_current_settings as s; c = s(); "
             "v = c.server.services.db_vacuum; "
             "print(json.dumps({'home': str(c.home), 'analytics': c.server.analytics_enabled, "
             "'leases': c.server.concurrency.lease_storage, 'vacuum': sorted(v.enabled), "
             "'flow_run_days': v.retention_period.days}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_process_started_from_the_repository_root_gets_the_project_settings():
    seen = _settings_seen_from(REPO_ROOT)
    # the database's retention (docs/nightly.md, "A node that never fills"): flow runs 90 days after their end
    assert seen == {"home": ".prefect", "analytics": False,
                    "leases": "prefect.server.concurrency.lease_storage.filesystem",
                    "vacuum": ["events", "flow_runs"], "flow_run_days": 90}


def test_the_command_line_finds_the_same_home_without_importing_prefect(monkeypatch):
    from titanflow.prefect_ops.local_server import prefect_home

    monkeypatch.delenv("PREFECT_HOME", raising=False)
    monkeypatch.chdir(REPO_ROOT)
    assert prefect_home() == REPO_ROOT.joinpath(".prefect").relative_to(REPO_ROOT)  # as Prefect: relative to cwd
    monkeypatch.setenv("PREFECT_HOME", "/elsewhere")
    assert str(prefect_home()) == "/elsewhere"
