"""SQL helpers shared by the store's migrations."""

import sqlite3

from sqlite_utils import Database


def run_script(db: Database, script: str) -> None:
    """Run ``script`` statement by statement inside the caller's transaction (executescript would COMMIT first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            db.conn.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"migration script ends with an incomplete statement: {statement[:80]!r}")
