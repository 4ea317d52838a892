"""A temporary server registers Prefect's block types once per PREFECT_HOME and installed collections
(titanflow.prefect_ops.local_server.block_types_registered): later starts skip the registration and its memo check,
which imports every installed collection, and the block types are still there."""

from __future__ import annotations

import json
import subprocess

import httpx

from titanflow.prefect_ops import local_server


def _block_type_slugs(api_url: str) -> set[str]:
    return {b["slug"] for b in httpx.post(f"{api_url}/block_types/filter", json={}, timeout=30).json()}


def test_the_settings_that_skip_registration_are_the_ones_prefect_reads(monkeypatch):
    from prefect.settings import Settings

    for name, value in local_server.SKIP_BLOCK_REGISTRATION.items():
        monkeypatch.setenv(name, value)
    server = Settings().server
    assert server.register_blocks_on_start is False and server.memoize_block_auto_registration is False


def test_block_types_are_registered_on_the_first_start_only_and_are_there_on_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    started_with = []
    real_popen = subprocess.Popen

    def popen(*args, env=None, **kwargs):
        started_with.append({k: env.get(k) for k in local_server.SKIP_BLOCK_REGISTRATION})
        return real_popen(*args, env=env, **kwargs)

    monkeypatch.setattr(local_server.subprocess, "Popen", popen)
    home = tmp_path / "home"
    assert not local_server.block_types_registered(home)
    with local_server.temporary_server(tmp_path / "first.log") as api_url:
        first = _block_type_slugs(api_url)
    assert local_server.block_types_registered(home)
    with local_server.temporary_server(tmp_path / "second.log") as api_url:
        second = _block_type_slugs(api_url)
    assert started_with == [dict.fromkeys(local_server.SKIP_BLOCK_REGISTRATION), local_server.SKIP_BLOCK_REGISTRATION]
    # Prefect's own block types and the installed collection's (prefect-kubernetes), registered by the first start
    assert {"local-file-system", "kubernetes-cluster-config"} <= first and second == first


def test_any_change_to_what_registration_depends_on_registers_again(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_MEMO_STORE_PATH", raising=False)
    monkeypatch.delenv("PREFECT_MEMO_STORE_PATH", raising=False)
    memo = tmp_path / "memo_store.toml"
    assert not local_server.block_types_registered(tmp_path)  # nothing recorded
    local_server.record_block_types(tmp_path)
    assert not (tmp_path / local_server.BLOCK_TYPES_RECORD).exists()  # the server wrote no memo: nothing to record
    memo.write_text('block_auto_registration = "a1"\n')
    local_server.record_block_types(tmp_path)
    assert local_server.block_types_registered(tmp_path)
    memo.write_text('block_auto_registration = "b2"\n')  # another start registered again
    assert not local_server.block_types_registered(tmp_path)
    memo.write_text('block_auto_registration = "a1"\n')
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db/prefect")  # another database
    assert not local_server.block_types_registered(tmp_path)
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL")
    recorded = json.loads((tmp_path / local_server.BLOCK_TYPES_RECORD).read_text())
    assert "prefect-kubernetes" in [name for name, _ in recorded["collections"]]  # installed by the cpu profile
    monkeypatch.setattr(local_server, "_installed_collections", lambda: [*recorded["collections"], ["prefect-aws", "1"]])
    assert not local_server.block_types_registered(tmp_path)  # a collection installed since
