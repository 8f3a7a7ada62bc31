"""Resolve where the database is: the URL the user gave, or the embedded one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from keelwave.db.embedded import EmbeddedPostgres
from keelwave.settings import Settings


def normalise_url(url: str) -> str:
    """Accept the URL spellings people paste (SQLAlchemy's, Heroku's) and hand libpq its own."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


@contextmanager
def database(settings: Settings) -> Iterator[str]:
    """Yield a conninfo for the configured database, running the embedded one if needed.

    The embedded server is shared: if ``keelwave serve`` already runs it, this
    joins it and leaves it running on exit.
    """
    if settings.database_url:
        yield normalise_url(settings.database_url)
        return
    embedded = EmbeddedPostgres(settings.data_dir)
    conninfo = embedded.start()
    try:
        yield conninfo
    finally:
        embedded.stop()
