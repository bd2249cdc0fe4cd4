"""Suite-wide settings. Subject-specific fixtures live in each folder's conftest."""

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from bench.pgserver import PostgresUnavailable, ThrowawayPostgres
from tests.ci import unavailable

# Property tests: no per-example deadline (CI machines are noisy and have 2 cores),
# and a bounded number of examples so `make test` stays well inside the CI budget.
settings.register_profile(
    "sharedesk",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("sharedesk")


# -- PostgreSQL -----------------------------------------------------------------------
# One throwaway server per test session (bench/pgserver.py), a fresh database per test.
# With CI=true a server that cannot start fails the run; elsewhere the tests that need it
# are skipped with the reason (shown in pytest's summary, -ra).


def start_postgres(*, fsync: bool) -> ThrowawayPostgres:
    """Start a throwaway server; fail the test under CI=true if none starts, else skip it."""
    try:
        return ThrowawayPostgres(fsync=fsync).start()
    except PostgresUnavailable as error:
        unavailable(str(error))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server on 127.0.0.1 for the whole test session (fsync off)."""
    server = start_postgres(fsync=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_dsn(postgres_server: ThrowawayPostgres) -> str:
    """The DSN of a new, empty database on the session's server."""
    from bench.pg import create_database

    return create_database(postgres_server.dsn, f"t_{uuid.uuid4().hex}")
