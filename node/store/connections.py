"""One SQLite connection per thread, to one store file.

The chain watcher runs on a thread and event loop of its own (node/dispatcher/watcher_thread.py),
so that nothing its clients do on the node's main loop can delay a slashable duty (issue 35).
A sqlite3 connection belongs to the thread that opened it, and two threads interleaving
transactions on one connection would corrupt both; so every thread gets a connection of its own
to the same file, opened on first use with the pragmas of the first. WAL lets them read at once;
writes take turns (`BEGIN IMMEDIATE` under `busy_timeout`: node/store/migrations.py).

The thread that opened the store keeps the original connection, so its behaviour is unchanged:
the other threads are the only new thing.
"""

import sqlite3
import threading

from sqlite_utils import Database

BUSY_TIMEOUT_MS = 5000
"""How long a write waits for another thread's (or process's) transaction before failing."""


def _open_like(path: str, synchronous: int) -> Database:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return Database(connection)


class PerThreadDatabase:
    """A `Database` look-alike: each attribute is the calling thread's own connection's."""

    def __init__(self, first: Database, path: str, synchronous: int):
        self._path, self._synchronous = path, synchronous
        self._local = threading.local()
        self._local.db = first
        self._opened: list[Database] = [first]
        self._guard = threading.Lock()

    def get_database(self) -> Database:
        """Return this thread's connection (opened now if it has none)."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = _open_like(self._path, self._synchronous)
            with self._guard:
                self._opened.append(db)
        return db

    def close_this_thread(self) -> None:
        """Close the calling thread's connection, if it opened one (a thread of its own, at its end)."""
        db = getattr(self._local, "db", None)
        if db is None:
            return
        self._local.db = None
        with self._guard:
            self._opened = [d for d in self._opened if d is not db]
        db.conn.close()

    def __getattr__(self, name: str):
        return getattr(self.get_database(), name)

    def close_all(self) -> None:
        """Close every thread's connection (at shutdown, once no thread uses the store)."""
        with self._guard:
            opened, self._opened = self._opened, []
        for db in opened:
            try:
                db.conn.close()
            except sqlite3.ProgrammingError:  # another thread's connection: closing it from here is refused,
                pass                            # and the process is ending; SQLite releases it at exit


def share_across_threads(db: Database, path: str) -> Database | PerThreadDatabase:
    """Return ``db`` usable from any thread (a file store); an in-memory store stays one thread's."""
    if path == ":memory:":
        return db
    synchronous = db.execute("PRAGMA synchronous").fetchone()[0]
    return PerThreadDatabase(db, path, synchronous)
