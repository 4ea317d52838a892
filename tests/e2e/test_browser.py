"""The Prefect UI as a user sees it: a cpu scenario run through its deployment on a local server
(titanflow.prefect_ops.server), its flow run page rendered by headless Chromium (the Debian package, installed
by `make chromium`, which `make test` runs). The server and the run are tests/conftest.py's session
fixtures ``deployed`` and ``passing_deployment_run``, the same ones tests/e2e/test_deployments.py checks.

The screenshots are kept in ``$TITANFLOW_TEST_OUTPUT`` (default ``<repo>/runs/test-output/``); their
paths are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.deployment_runs import PASS_RUN_ID, PASS_STEPS

from titanflow.report.markdown import summary_markdown
from titanflow.paths import REPO_ROOT

pytestmark = pytest.mark.browser

OUTPUT = Path(os.environ.get("TITANFLOW_TEST_OUTPUT", REPO_ROOT / "runs" / "test-output"))
#: Headless Chromium without a display, GPU, network side traffic or first-run UI. The UI is a JS app:
#: --virtual-time-budget lets its API calls finish before the DOM is dumped or the page captured.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--window-size=1400,1000",
                  "--virtual-time-budget=15000"]


class _Text(HTMLParser):
    """The visible text of an HTML document (script and style contents left out), space-joined."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data):
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def chromium(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """Render ``url``; returns the text of the rendered DOM, or writes ``screenshot`` (PNG) and returns ''."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: run `make chromium` (apt-get install chromium)")
    action = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, url],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    if screenshot:
        return ""
    parser = _Text()
    parser.feed(done.stdout)
    return " ".join(parser.parts)


def test_flow_run_page_shows_the_run_completed_with_its_artifacts(deployed, passing_deployment_run, tmp_path):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    run = passing_deployment_run.run  # qwen3-scenario/native-cpu-random, steps=3 (tests/helpers/deployment_runs.py)
    assert run.returncode == 0, run.output[-4000:]
    with SyncPrefectClient(deployed.api_url) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run.flow_run_id])))
    keys = {a.key for a in artifacts if a.key}
    # the report task (titanflow/report/publish.py): the summary (markdown) and per-step metrics (table) of native/cpu/random
    assert {"native-cpu-random-summary", "native-cpu-random-metrics"} <= keys

    page = f"{deployed.ui_url}/v2/runs/flow-run/{run.flow_run_id}"
    artifacts_tab = chromium(f"{page}?tab=Artifacts", tmp_path / "profile-1")
    assert "qwen3-scenario" in artifacts_tab and "native-cpu-random" in artifacts_tab
    assert "Completed" in artifacts_tab and "Failed" not in artifacts_tab
    assert all(key in artifacts_tab for key in keys), (keys, artifacts_tab[:3000])

    # the resolved parameters are in the run's log (flows/scenario.py logs them as JSON)
    logs_tab = chromium(f"{page}?tab=Logs", tmp_path / "profile-2")
    assert f"run {PASS_RUN_ID} with" in logs_tab and f'"steps":{PASS_STEPS}' in logs_tab

    # the markdown report rendered: its heading is the one titanflow/report/markdown.py writes for this run's summary
    summary = passing_deployment_run.summary()
    heading = summary_markdown(summary).splitlines()[0].removeprefix("# ")
    assert heading.endswith("PASS")
    (report,) = [a for a in artifacts if a.key == "native-cpu-random-summary"]
    summary_page = chromium(f"{deployed.ui_url}/v2/artifacts/artifact/{report.id}", tmp_path / "profile-3")
    assert heading in summary_page

    OUTPUT.mkdir(parents=True, exist_ok=True)
    shots = [OUTPUT / "flow-run-artifacts.png", OUTPUT / "summary-artifact.png"]
    chromium(f"{page}?tab=Artifacts", tmp_path / "profile-4", screenshot=shots[0])
    chromium(f"{deployed.ui_url}/v2/artifacts/artifact/{report.id}", tmp_path / "profile-5", screenshot=shots[1])
    for shot in shots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        print(f"\nscreenshot: {shot}")
