"""The throwaway PostgreSQL server the PostgreSQL tests and the bench start."""

from __future__ import annotations

import psycopg

from bench.pgserver import ThrowawayPostgres


class TestThrowawayPostgres:
    def test_server_answers_on_loopback(self, postgres_server: ThrowawayPostgres) -> None:
        with psycopg.connect(postgres_server.dsn) as conn:
            row = conn.execute("select inet_server_addr()::text").fetchone()
        assert row is not None and row[0].startswith("127.0.0.1")

    def test_each_test_gets_an_empty_database(self, postgres_dsn: str) -> None:
        with psycopg.connect(postgres_dsn) as conn:
            row = conn.execute(
                "select count(*) from information_schema.tables where table_schema = 'public'"
            ).fetchone()
        assert row == (0,)

    def test_stop_removes_the_data_directory(self) -> None:
        server = ThrowawayPostgres(fsync=False).start()
        root = server.data_dir.parent
        server.stop()
        assert not root.exists()
