"""The Hub token: found in HF_TOKEN or a Prefect Secret block, handed to huggingface_hub only, and
absent from every return value, exception text, traceback chain, log record and the Prefect database.

A distinctive token is planted in each source. Weights come from a hand-built HF cache
(``models--org--tiny/refs/main`` -> ``snapshots/<commit>/``, the layout huggingface_hub writes) with
HF_HUB_OFFLINE=1 (tests/conftest.py), or the download fails: against a local HTTP server standing in
for the Hub (``huggingface_hub.constants.ENDPOINT``) that quotes the request's Authorization header in
its error reply, and from a patched ``snapshot_download`` that raises with the token in its text.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import huggingface_hub
import pytest
from helpers.secrets import assert_secret_absent
from huggingface_hub import constants as hf_constants
from pydantic import SecretStr

from titanflow.prefect_ops.hub_token import TOKEN_BLOCK_ENV, hub_token, token_for
from titanflow.weights.resolve import (
    REDACTED,
    HubToken,
    TransientDownloadError,
    WeightsError,
    redact,
    resolve_weights,
)

#: Planted in HF_TOKEN. Shorter than a real token (hf_ + 34), so only exact-value redaction can hide it.
ENV_TOKEN = "hf_PLANTEDtoken123"
#: Planted in the Prefect Secret block.
BLOCK_TOKEN = "hf_PLANTEDblock456"
BLOCK_NAME = "titanflow-test-hf-token"
REPO = "org/tiny"
#: A commit hash as the Hub names snapshots (40 hex digits).
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _everything_said(err: BaseException) -> str:
    """All text a failure can show: its message and the whole traceback chain Prefect logs."""
    return str(err) + "".join(traceback.format_exception(err))


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch, tiny_assets) -> Path:
    """A hand-built HF cache holding ``org/tiny`` at ``COMMIT`` (the tiny model's files); its snapshot folder."""
    cache = tmp_path / "hub"
    storage = cache / "models--org--tiny"
    snapshot = storage / "snapshots" / COMMIT
    shutil.copytree(tiny_assets.weights_dir, snapshot)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))  # read by snapshot_download at call time
    return snapshot


@pytest.fixture()
def no_ambient_token(tmp_path, monkeypatch):
    """No token but the ones a test plants: no HF_TOKEN, no stored login, no block name."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", TOKEN_BLOCK_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-stored-token"))


@pytest.fixture()
def spy_download(monkeypatch):
    """``huggingface_hub.snapshot_download`` wrapped to record the ``token`` each call got."""
    seen: list[str | None] = []
    real = huggingface_hub.snapshot_download

    def spy(*args, **kwargs):
        seen.append(kwargs.get("token"))
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    return seen


@pytest.fixture()
def echoing_hub(monkeypatch):
    """Factory: ``start(status) -> list of Authorization headers received``; a local server standing in
    for the Hub that answers every GET with ``status`` and an error naming the request's Authorization
    header (as a misconfigured proxy or a verbose server might), huggingface_hub online and pointed at it."""
    servers = []

    def start(status: int) -> list[str | None]:
        received: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                auth = self.headers.get("Authorization")
                received.append(auth)
                body = json.dumps({"error": f"Invalid credentials in Authorization header: {auth}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        return received

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# --- redact ------------------------------------------------------------------------------------

def test_redact_hides_the_given_secret_and_any_hub_shaped_token():
    other = "hf_" + "A1b2C3d4E5" * 3 + "XyZw"  # 34 characters after hf_, as the Hub issues them
    text = f"Bearer {ENV_TOKEN}; stored {other}; hf_short stays"
    assert redact(text, SecretStr(ENV_TOKEN)) == f"Bearer {REDACTED}; stored {REDACTED}; hf_short stays"
    assert redact(text, None) == f"Bearer {ENV_TOKEN}; stored {REDACTED}; hf_short stays"


# --- HF_TOKEN ----------------------------------------------------------------------------------

def test_env_token_goes_to_snapshot_download_only(monkeypatch, no_ambient_token, hub_cache, spy_download, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    token = hub_token()
    assert token is not None and token.value.get_secret_value() == ENV_TOKEN
    assert ENV_TOKEN not in repr(token) and ENV_TOKEN not in str(token)  # SecretStr shows **********
    assert "HF_TOKEN" in token.source
    folder = resolve_weights(REPO)
    assert folder == hub_cache  # the cached snapshot, offline
    assert spy_download == [ENV_TOKEN]
    assert ENV_TOKEN not in str(folder) and ENV_TOKEN not in caplog.text


def test_no_token_anywhere_downloads_without_one(no_ambient_token, hub_cache, spy_download):
    assert hub_token() is None
    assert resolve_weights(REPO) == hub_cache
    assert spy_download == [None]


@pytest.mark.fault
@pytest.mark.parametrize(("status", "error_type"), [
    (401, WeightsError),            # refused: huggingface_hub re-raises the HTTP error itself
    (500, TransientDownloadError),  # Hub down: snapshot_download's LocalEntryNotFoundError chains it
])
def test_hub_error_quoting_the_token_is_redacted_and_unchained(status, error_type, monkeypatch, tmp_path,
                                                                 no_ambient_token, echoing_hub, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    received = echoing_hub(status)
    with pytest.raises(WeightsError) as caught:
        resolve_weights(REPO)
    err = caught.value
    assert f"Bearer {ENV_TOKEN}" in received  # the token did reach the Hub's request
    assert type(err) is error_type
    said = _everything_said(err)
    assert f"Bearer {REDACTED}" in said  # the server's reply is kept, redacted
    assert ENV_TOKEN not in said and ENV_TOKEN not in caplog.text
    assert err.__cause__ is None and err.__context__ is None  # the raw huggingface_hub error is not chained
    assert REPO in str(err)


@pytest.mark.fault
@pytest.mark.parametrize(("raised", "error_type"), [
    (OSError, TransientDownloadError), (RuntimeError, WeightsError), (ValueError, WeightsError)])
def test_any_download_failure_text_is_redacted(raised, error_type, monkeypatch, no_ambient_token, caplog):
    caplog.set_level(logging.DEBUG)

    def failing(*args, token=None, **kwargs):
        raise raised(f"request with token={token} failed")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(WeightsError) as caught:
        resolve_weights(REPO, token=HubToken(SecretStr(ENV_TOKEN), "test"))
    err = caught.value
    assert type(err) is error_type
    assert f"request with token={REDACTED} failed" in str(err)
    assert ENV_TOKEN not in _everything_said(err) and ENV_TOKEN not in caplog.text
    assert err.__cause__ is None and err.__context__ is None


# --- Prefect Secret block ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefect_db():
    """A temporary Prefect server (``prefect_test_harness``) holding the Secret block ``BLOCK_NAME``;
    yields the folder of its SQLite database."""
    from prefect.blocks.system import Secret
    from prefect.settings import (
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_SERVER_DATABASE_CONNECTION_URL,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90), \
            temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        Secret(value=BLOCK_TOKEN).save(BLOCK_NAME, overwrite=True)
        yield Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1]).parent


def _flow_run_logs(flow_run_id) -> list[str]:
    """Every log message the server stored for the flow run (after flushing this process's log batches)."""
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from titanflow.prefect_ops.drain import send_buffered

    send_buffered()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [log.message for log in logs]


def test_block_token_used_when_huggingface_hub_has_none(prefect_db, monkeypatch, no_ambient_token, hub_cache,
                                                        spy_download, caplog):
    from prefect import flow

    from titanflow.tasks.weights import pull_weights

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(TOKEN_BLOCK_ENV, BLOCK_NAME)

    @flow
    def pull():
        return pull_weights(REPO, "random")

    state = pull(return_state=True)
    assert state.result() == str(hub_cache)
    assert spy_download == [BLOCK_TOKEN]
    logs = _flow_run_logs(state.state_details.flow_run_id)
    assert f"Hub token: from Prefect Secret block {BLOCK_NAME!r}" in logs  # the source is logged, not the value
    assert not any(BLOCK_TOKEN in line for line in logs)
    assert BLOCK_TOKEN not in caplog.text


def test_env_token_wins_over_the_block(prefect_db, monkeypatch, no_ambient_token):
    monkeypatch.setenv(TOKEN_BLOCK_ENV, BLOCK_NAME)
    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    assert hub_token().value.get_secret_value() == ENV_TOKEN


@pytest.mark.fault
def test_failed_pull_with_block_token_leaves_it_nowhere(prefect_db, monkeypatch, tmp_path, no_ambient_token,
                                                       echoing_hub, caplog):
    from prefect import flow

    from titanflow.tasks.weights import pull_weights

    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv(TOKEN_BLOCK_ENV, BLOCK_NAME)
    received = echoing_hub(401)

    @flow
    def pull():
        return pull_weights(REPO, "random")

    state = pull(return_state=True)
    assert state.is_failed()
    assert f"Bearer {BLOCK_TOKEN}" in received  # the block's token did reach the Hub's request
    err = state.result(raise_on_failure=False)
    assert isinstance(err, WeightsError) and f"Bearer {REDACTED}" in str(err)
    assert BLOCK_TOKEN not in _everything_said(err) and BLOCK_TOKEN not in (state.message or "")
    logs = _flow_run_logs(state.state_details.flow_run_id)
    assert any("the Hub refused org/tiny (HTTP 401)" in line for line in logs)  # the failure was logged ...
    assert not any(BLOCK_TOKEN in line for line in logs)  # ... redacted
    assert BLOCK_TOKEN not in caplog.text
    # the server's database (logs, states, the block, stored encrypted) holds it nowhere readable
    assert assert_secret_absent(prefect_db, BLOCK_TOKEN) >= 1


@pytest.mark.fault
def test_block_that_cannot_be_loaded_is_named_with_the_fix(prefect_db, monkeypatch, no_ambient_token):
    monkeypatch.setenv(TOKEN_BLOCK_ENV, "no-such-block")
    with pytest.raises(WeightsError, match=f"{TOKEN_BLOCK_ENV}='no-such-block'.*create it") as caught:
        hub_token()
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_secret_search_finds_it_in_text_and_in_compressed_parquet(tmp_path):
    import pandas as pd

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"error": "nothing secret"}))
    (run / "empty.log").write_text("")
    assert assert_secret_absent(tmp_path, ENV_TOKEN) == 2
    # gzip pages and no column statistics: the file's bytes do not hold the token, its cells do
    pd.DataFrame({"reason": [f"token {ENV_TOKEN}"]}).to_parquet(run / "runs.parquet", compression="gzip",
                                                              write_statistics=False)
    assert ENV_TOKEN.encode() not in (run / "runs.parquet").read_bytes()
    (run / "train.log").write_text(f"Authorization: Bearer {ENV_TOKEN}\n")
    with pytest.raises(AssertionError) as caught:
        assert_secret_absent([run / "summary.json", tmp_path / "runs"], ENV_TOKEN)
    message = str(caught.value)
    assert "2 file(s)" in message and "runs.parquet (a parquet cell)" in message and "train.log (byte 22)" in message
    assert ENV_TOKEN not in message
    with pytest.raises(ValueError, match="at least 8"):
        assert_secret_absent(tmp_path, "hf_x")


@pytest.mark.parametrize(("cause", "error_type"), [
    # a machine without network: getaddrinfo's EAI_NONAME, the same on every retry (measured: 40 s of two retries)
    ("[Errno -2] Name or service not known", WeightsError),
    # a resolver that did not answer in time: a retry may fix it
    ("[Errno -3] Temporary failure in name resolution", TransientDownloadError),
    ("[Errno 111] Connection refused", TransientDownloadError),
])
def test_an_unknown_hub_host_is_not_retried_while_a_failed_connection_is(cause, error_type):
    """snapshot_download falls back to the local cache when the Hub cannot be reached, and raises
    LocalEntryNotFoundError chained to the connection's error: that error decides whether the train of retries of
    pull_weights (titanflow.tasks.retry.retry_transient_download) is worth starting."""
    import httpx
    from huggingface_hub.errors import LocalEntryNotFoundError

    from titanflow.weights.resolve import _download_error

    try:
        raise LocalEntryNotFoundError("not in the cache") from httpx.ConnectError(cause)
    except LocalEntryNotFoundError as err:
        error = _download_error(REPO, err, None)
    assert type(error) is error_type and "is not in the local HF cache" in str(error)
    # the same answer raised by the resolver itself (socket.gaierror, an OSError), not chained by huggingface_hub
    import socket

    assert type(_download_error(REPO, socket.gaierror(cause), None)) is error_type
