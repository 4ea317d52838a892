"""titanflow.prefect_ops.database_revision: a Prefect database a newer Prefect migrated is refused before the temporary
server starts, in under 2 s, naming both versions and the fix; one the installed Prefect knows starts as before.

The revisions are the installed Prefect's own: the ids its migration files declare, the same set alembic's own
``ScriptDirectory`` walks (checked here). The lowest lane (make test-lowest: Prefect 3.9.0) runs the test against a
database the newest Prefect (the ``.venv`` beside ``.venv-lowest``: 3.9.1, whose newest revision 27d8f4e1a6c9 3.9.0
does not know) migrated with ``prefect server database upgrade``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from helpers.terminal import TITANFLOW

from titanflow.paths import REPO_ROOT
from titanflow.prefect_ops.database_revision import (DATABASE_RECORD, SQLITE_MIGRATIONS, NewerDatabase, check_database,
                                                     database_revision, known_revisions, record_database,
                                                     sqlite_database)

#: The venv of the newest Prefect: ``.venv`` beside the running one (a checkout's two lanes, .venv and .venv-lowest).
NEWEST_VENV = Path(sys.prefix).parent / ".venv"
#: A revision no Prefect ships (alembic's ids are 12 hex digits).
UNKNOWN = "0123456789ab"


@pytest.fixture(autouse=True)
def _default_database(monkeypatch):
    """Prefect's default database of a home: no connection URL from the environment."""
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)


def _database(home: Path, revision: str | None) -> Path:
    """``home``/prefect.db with an ``alembic_version`` table holding ``revision`` (no table for None)."""
    home.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(home / "prefect.db") as connection:
        if revision is not None:
            connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
            connection.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    connection.close()
    return home / "prefect.db"


def test_the_revisions_are_those_alembic_walks_in_the_installed_prefect():
    from alembic.script import ScriptDirectory
    from prefect.server.database.alembic_commands import alembic_config

    import prefect

    script = ScriptDirectory.from_config(alembic_config())
    script.version_locations = [str(Path(prefect.__file__).parent / SQLITE_MIGRATIONS)]  # as Prefect's env.py sets it
    revisions, head = known_revisions()
    assert revisions == {s.revision for s in script.walk_revisions()} and len(revisions) > 100
    assert [head] == script.get_heads()


def test_a_database_the_installed_prefect_knows_or_none_at_all_is_not_refused(tmp_path):
    revisions, head = known_revisions()
    check_database(tmp_path / "new")  # no database yet: the server creates it
    _database(tmp_path / "empty", None)
    check_database(tmp_path / "empty")  # a file without Prefect's table
    for revision in (head, "9725c1cbee35"):  # its newest; its first (Prefect upgrades an older database itself)
        assert revision in revisions
        _database(tmp_path / revision, revision)
        check_database(tmp_path / revision)
        assert database_revision(tmp_path / revision / "prefect.db") == revision
        assert sorted(p.name for p in (tmp_path / revision).iterdir()) == ["prefect.db"]  # read, nothing written


def test_a_database_of_an_unknown_revision_is_refused_with_the_fix_and_the_fix_works(tmp_path):
    database = _database(tmp_path / "home", UNKNOWN)
    installed, head = version("prefect"), known_revisions()[1]
    with pytest.raises(NewerDatabase) as refused:
        check_database(tmp_path / "home")
    said = str(refused.value)
    assert said.startswith(f"PREFECT_HOME: the Prefect database {database} was migrated by a newer Prefect (schema "
                           f"revision {UNKNOWN}, which Prefect {installed} does not know); the installed Prefect "
                           f"{installed} knows revisions up to {head} and cannot open it")
    assert f"PREFECT_HOME=.prefect-{installed} titanflow ..." in said
    move = said.split("if any): ", 1)[1]
    assert move == f"mkdir {database}.{UNKNOWN} && mv {database} {database}.{UNKNOWN}/"
    subprocess.run(move, shell=True, check=True)  # the fix as printed: the database kept aside, the home usable
    assert database_revision(tmp_path / "home" / f"prefect.db.{UNKNOWN}" / "prefect.db") == UNKNOWN
    check_database(tmp_path / "home")


def test_the_prefect_that_migrated_it_is_named_where_the_record_beside_it_says_so(tmp_path):
    """The record a server start writes (record_database); here one of a Prefect 9.9.9 that migrated it."""
    home = tmp_path / "home"
    _database(home, known_revisions()[1])
    record_database(home)
    assert json.loads((home / DATABASE_RECORD).read_text()) == {"revision": known_revisions()[1],
                                                                 "prefect": version("prefect")}
    _database(tmp_path / "other", UNKNOWN)
    (tmp_path / "other" / DATABASE_RECORD).write_text(json.dumps({"revision": UNKNOWN, "prefect": "9.9.9"}))
    with pytest.raises(NewerDatabase, match=rf"migrated by Prefect 9\.9\.9 \(schema revision {UNKNOWN}\); the "
                                            rf"installed Prefect {version('prefect')} knows"):
        check_database(tmp_path / "other")


def test_the_database_is_the_connection_urls_sqlite_file_and_another_database_is_not_checked(tmp_path, monkeypatch):
    assert sqlite_database(tmp_path) == tmp_path / "prefect.db"
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", f"sqlite+aiosqlite:///{tmp_path}/elsewhere.db")
    assert sqlite_database(tmp_path / "home") == tmp_path / "elsewhere.db"
    for url in ("postgresql+asyncpg://user:pw@db:5432/prefect", "sqlite+aiosqlite:///:memory:"):
        monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", url)
        assert sqlite_database(tmp_path) is None
        check_database(tmp_path)


def _newest_prefect() -> str | None:
    """The version of the Prefect in :data:`NEWEST_VENV`, None where there is none."""
    python = NEWEST_VENV / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", "from importlib.metadata import version; print(version('prefect'))"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_from_the_lowest_lane_a_database_the_newest_prefect_migrated_is_refused_in_under_2_s(tmp_path):
    """The newest Prefect migrates a home's database (and titanflow records it, as its temporary server does); a
    ``titanflow run`` of the installed, older Prefect is refused before any server starts."""
    from packaging.version import Version

    newest, installed = _newest_prefect(), version("prefect")
    if newest is None or Version(newest) <= Version(installed):
        pytest.skip(f"needs a Prefect newer than the installed {installed} in {NEWEST_VENV}: the lowest lane runs it "
                    "(make test-lowest)")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | {
        "PREFECT_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([str(NEWEST_VENV / "bin" / "prefect"), "server", "database", "upgrade", "-y"], env=env,
                   cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([str(NEWEST_VENV / "bin" / "python"), "-c", "import sys; from pathlib import Path; from "
                    "titanflow.prefect_ops.database_revision import record_database; record_database(Path(sys.argv[1]))",
                    str(home)], env=env, cwd=tmp_path, check=True)
    revision = database_revision(home / "prefect.db")
    assert revision not in known_revisions()[0]
    started = time.monotonic()
    proc = subprocess.run([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(tmp_path / "runs")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    wall_s = time.monotonic() - started
    print(f"\n{proc.stderr}\nrefused in {wall_s:.2f} s")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"was migrated by Prefect {newest} (schema revision {revision}); the installed Prefect {installed}" in \
           proc.stderr
    assert f"mkdir {home}/prefect.db.prefect-{newest} && mv {home}/prefect.db" in proc.stderr
    assert "Traceback" not in proc.stderr and not (home / "titanflow-server.log").exists()  # no server started
    assert not (tmp_path / "runs").exists()  # nothing written for the run
    assert wall_s < 2.0
    move = proc.stderr.split("if any): ", 1)[1].strip()
    subprocess.run(move, shell=True, check=True)
    check_database(home)  # the fix as printed leaves a home this Prefect can start a server in


def test_the_command_line_says_the_refusal_without_a_traceback_and_starts_no_server(tmp_path, monkeypatch, capsys):
    """titanflow.cli._with_api (every command's way to its temporary server): a refusal, not an exception."""
    from titanflow.cli import _with_api

    _database(tmp_path / "home", UNKNOWN)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert _with_api(lambda: pytest.fail("the call ran")) == (False, None)
    said = capsys.readouterr().err
    assert said.startswith(f"titanflow: PREFECT_HOME: the Prefect database {tmp_path / 'home' / 'prefect.db'} was "
                           f"migrated by a newer Prefect (schema revision {UNKNOWN}") and "Traceback" not in said
    assert not (tmp_path / "home" / "titanflow-server.log").exists() and "PREFECT_API_URL" not in os.environ
