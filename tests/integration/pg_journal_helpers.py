"""The PostgreSQL journal's test helpers, shared by its integration test modules (so that no
test module imports another): the ``make_journal`` fixture and :func:`sql`. A module using the
fixture imports the server fixtures it depends on too::

    from tests.integration.pg_journal_helpers import make_journal  # noqa: F401 (fixture)
    from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memroute.journal import PostgresJournal
from tests.journal_cases import opened_journals


@pytest.fixture
def make_journal(postgres_url):
    """``make_journal(**kwargs)``: another PostgresJournal (a replica) on the test's database."""
    with opened_journals(lambda **kwargs: PostgresJournal(postgres_url, **kwargs)) as make:
        yield make


def sql(j: PostgresJournal, statement: str, **args):
    """``statement`` in a transaction of its own on ``j``'s engine: its rows, or its rowcount."""
    with j._engine.begin() as conn:
        result = conn.execute(sa.text(statement), args)
        return result.all() if result.returns_rows else result.rowcount
