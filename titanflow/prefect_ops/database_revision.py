"""Whether the installed Prefect can open the Prefect database of a home, known before its server starts.

    from titanflow.prefect_ops.database_revision import check_database
    check_database(Path(".prefect"))  # raises NewerDatabase for a database a newer Prefect migrated

Prefect's server migrates its SQLite database with alembic when it starts and records the schema's revision in the
database's ``alembic_version`` table. A Prefect older than the one that last migrated the database does not know that
revision and cannot start a server on it (alembic: "Can't locate revision identified by '27d8f4e1a6c9'"): two venvs
of one team over one checkout's ``.prefect/``, or a downgrade, meet it. :func:`check_database` compares the revision
with the ones the installed Prefect ships, in milliseconds, and refuses with both versions and the fix.

The installed Prefect's revisions are read as text from its migration files
(``prefect/server/database/_migrations/versions/sqlite/*.py``, the ``revision = "..."`` line each of them has, as
alembic's own template writes it), found without importing Prefect. alembic's ``ScriptDirectory`` would give the same
ids, but it imports each of the 116 migration modules to read them, and 46 of those import Prefect, whose import fixes
its settings before the command line has set ``PREFECT_API_URL`` (titanflow.cli._with_api), and takes seconds.

Which Prefect migrated a database is not in it: :func:`record_database` writes it beside the database after each
server start (:data:`DATABASE_RECORD`), and a refusal names it where that record holds the database's revision, else
the revision alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import tomllib
from importlib.metadata import version
from pathlib import Path


class NewerDatabase(RuntimeError):
    """The Prefect database was migrated by a Prefect newer than the installed one; the message names both versions
    (or the database's revision, where no record says which Prefect wrote it), the database and the fix."""


#: titanflow's record, in PREFECT_HOME, of the revision the last server start left in the database and the Prefect
#: that ran it.
DATABASE_RECORD = "titanflow-database.json"
#: Prefect's SQLite migrations, under its package folder.
SQLITE_MIGRATIONS = Path("server", "database", "_migrations", "versions", "sqlite")
#: A migration file's revision and the one it follows (alembic's script template: ``revision = "27d8f4e1a6c9"``).
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::\s*[\w\[\], |]+)?=\s*[\"']([0-9a-f]+)[\"']", re.MULTILINE)


def sqlite_database(home: Path) -> Path | None:
    """The SQLite file Prefect's server uses in ``home``: the connection URL of PREFECT_SERVER_DATABASE_CONNECTION_URL
    (or its older name PREFECT_API_DATABASE_CONNECTION_URL), else of ``[server.database] connection_url`` in
    ./prefect.toml, else Prefect's default ``<home>/prefect.db``. None for a database that is not a SQLite file
    (PostgreSQL, an in-memory SQLite): its revisions are another folder's, and it is not checked here."""
    url = os.environ.get("PREFECT_SERVER_DATABASE_CONNECTION_URL") or os.environ.get(
        "PREFECT_API_DATABASE_CONNECTION_URL")
    if not url and Path("prefect.toml").is_file():
        url = tomllib.loads(Path("prefect.toml").read_text()).get("server", {}).get("database", {}).get(
            "connection_url")
    if not url:
        return home / "prefect.db"
    match = re.match(r"^sqlite(?:\+\w+)?:///(?P<path>[^?]+)", url)
    if match is None or match.group("path") in (":memory:", ""):
        return None
    return Path(match.group("path")).expanduser()


def database_revision(database: Path) -> str | None:
    """The schema revision in ``database``'s ``alembic_version`` table; None when the file or the table does not
    exist yet (a server start creates them), or the table is empty. Opened read-only, and nothing is written: a
    database without a write-ahead log beside it holds all its pages in its file and is opened as immutable, since a
    read-only open of a WAL database otherwise leaves its ``-wal`` and ``-shm`` files behind."""
    if not database.is_file():
        return None
    immutable = "&immutable=1" if not Path(f"{database}-wal").exists() else ""
    connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro{immutable}", uri=True, timeout=5.0)
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return None
        raise
    finally:
        connection.close()
    return row[0] if row else None


def known_revisions() -> tuple[set[str], str]:
    """(every SQLite schema revision the installed Prefect ships, its newest): read from its migration files
    (module docstring), Prefect not imported.

    Raises:
        FileNotFoundError: Prefect is not installed, or holds no SQLite migrations there.
    """
    spec = importlib.util.find_spec("prefect")  # the package's folder, without running its __init__
    folders = [Path(p) / SQLITE_MIGRATIONS for p in (spec.submodule_search_locations or [])] if spec else []
    folder = next((f for f in folders if f.is_dir()), None)
    if folder is None:
        raise FileNotFoundError(f"no Prefect SQLite migrations found ({SQLITE_MIGRATIONS} of the prefect package)")
    revisions, parents = set(), set()
    for path in folder.glob("*.py"):
        found = dict(_REVISION.findall(path.read_text()))
        if "revision" in found:
            revisions.add(found["revision"])
            parents.add(found.get("down_revision"))
    heads = sorted(revisions - parents)
    return revisions, heads[-1] if heads else ""


def _recorded(home: Path) -> dict:
    """The :data:`DATABASE_RECORD` in ``home``; {} when there is none or it cannot be read."""
    try:
        record = json.loads((home / DATABASE_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def record_database(home: Path) -> None:
    """After a server start in ``home`` answered (its start-up ran the migrations): record the database's revision and
    the installed Prefect's version in :data:`DATABASE_RECORD`; nothing for a database that is not a SQLite file."""
    database = sqlite_database(home)
    revision = database_revision(database) if database is not None else None
    if revision is not None:
        (home / DATABASE_RECORD).write_text(json.dumps({"revision": revision, "prefect": version("prefect")}))


def check_database(home: Path) -> None:
    """Refuse a Prefect database in ``home`` that a newer Prefect migrated (module docstring); nothing for one the
    installed Prefect knows (it migrates an older one itself), a new home, or a database that is not a SQLite file.

    Raises:
        NewerDatabase: the database's revision is not one of the installed Prefect's; the message names the installed
            Prefect's version, the Prefect that migrated it (:data:`DATABASE_RECORD`) or else its revision, the
            database and the fix: a Prefect home of this version's own, or the ``mv`` that moves the database aside.
    """
    database = sqlite_database(home)
    revision = database_revision(database) if database is not None else None
    if revision is None:
        return
    revisions, head = known_revisions()
    if revision in revisions:
        return
    installed = version("prefect")
    record = _recorded(home)
    if record.get("revision") == revision and record.get("prefect"):
        by, tag = f"Prefect {record['prefect']} (schema revision {revision})", f"prefect-{record['prefect']}"
    else:
        by, tag = f"a newer Prefect (schema revision {revision}, which Prefect {installed} does not know)", revision
    files = [database] + [p for p in (Path(f"{database}-wal"), Path(f"{database}-shm")) if p.exists()]
    aside = database.parent / f"{database.name}.{tag}"
    raise NewerDatabase(
        f"PREFECT_HOME: the Prefect database {database} was migrated by {by}; the installed Prefect {installed} knows "
        f"revisions up to {head} and cannot open it (Prefect does not downgrade its database). fix: run with the "
        f"Prefect that migrated it, or give Prefect {installed} a home of its own (PREFECT_HOME=.prefect-{installed} "
        f"titanflow ...), or move this database aside, kept (with its write-ahead log, if any): mkdir {aside} && mv "
        f"{' '.join(map(str, files))} {aside}/")
