"""A throwaway PostgreSQL server on 127.0.0.1, for the tests and the bench.

:class:`ThrowawayPostgres` runs ``initdb`` into a new temporary directory, starts the
server on a free loopback port (its socket directory inside that temporary directory)
and removes everything on :meth:`~ThrowawayPostgres.stop`. Nothing is installed: the
server binaries are looked up in ``$SHAREDESK_PG_BIN``, ``pg_config --bindir``,
``/usr/lib/postgresql/<version>/bin`` (the newest) and ``$PATH``. ``initdb`` refuses to
run as root, so as root the server runs as the ``postgres`` user (which Debian's
``postgresql`` package creates).

Any failure to find or start a server raises :class:`PostgresUnavailable` carrying the
reason, so a caller can say clearly why it could not run (or fail, in CI).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Self

__all__ = ["PostgresUnavailable", "ThrowawayPostgres", "find_bindir"]

#: Seconds ``pg_ctl`` waits for the server to start or stop.
_PG_CTL_TIMEOUT: Final = 60


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server could be started here; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot start a PostgreSQL server: {reason}")
        self.reason = reason


def find_bindir() -> Path | None:
    """Return the directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``.

    Cost: at most one ``pg_config`` subprocess and a few ``stat`` calls.
    """
    candidates: list[Path] = []
    if env := os.environ.get("SHAREDESK_PG_BIN"):
        candidates.append(Path(env))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
        candidates.extend(p / "bin" for p in reversed(versions))
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all((bindir / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayPostgres:
    """One PostgreSQL server in a temporary directory, listening on 127.0.0.1 only.

    Args:
        fsync: Whether the server fsyncs its WAL (``False`` makes the tests faster;
            the bench keeps it on, so its figures are durable writes).
        max_connections: The server's ``max_connections``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, *, fsync: bool = True, max_connections: int = 200) -> None:
        self._fsync = fsync
        self._max_connections = max_connections
        self._root: Path | None = None
        self._port = 0
        self._bindir: Path | None = None
        self._demote: Callable[[], None] | None = None

    @property
    def port(self) -> int:
        """The TCP port the server listens on (0 before :meth:`start`)."""
        return self._port

    @property
    def dsn(self) -> str:
        """A libpq connection URI for the server's ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self._port}/postgres"

    @property
    def data_dir(self) -> Path:
        """The server's data directory (valid between :meth:`start` and :meth:`stop`)."""
        if self._root is None:
            raise RuntimeError("the server is not started")
        return self._root / "data"

    def start(self) -> Self:
        """Create the cluster and start the server; return ``self``.

        Raises:
            PostgresUnavailable: No server binaries, no non-root user to run them as, or
                the server did not start (the reason holds the server's log tail).

        Cost: ``initdb`` (about 1-2 s) and a server start (about 1 s).
        """
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailable(
                "no initdb/pg_ctl/postgres found (install Debian's 'postgresql' package, "
                "or set SHAREDESK_PG_BIN)"
            )
        self._bindir = bindir
        root = Path(tempfile.mkdtemp(prefix="sharedesk-pg-"))
        self._root = root
        try:
            if os.geteuid() == 0:
                try:
                    user = pwd.getpwnam("postgres")
                except KeyError:
                    raise PostgresUnavailable(
                        "running as root and there is no 'postgres' user to run the server as"
                    ) from None
                os.chown(root, user.pw_uid, user.pw_gid)
                uid, gid = user.pw_uid, user.pw_gid

                def demote() -> None:
                    os.setgid(gid)
                    os.setuid(uid)

                self._demote = demote
            self._run(
                "initdb",
                "-D",
                str(root / "data"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
            self._start_server()
        except BaseException:
            self._remove()
            raise
        return self

    def _start_server(self) -> None:
        assert self._root is not None
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind
            self._port = _free_port()
            try:
                self._pg_ctl_start()
                return
            except PostgresUnavailable as error:
                last = error.reason
        raise PostgresUnavailable(last)

    def restart(self, *, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash would) and start it on the same port.

        Cost: a server stop and start (about 1 s; ``immediate`` adds WAL recovery).
        """
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        assert self._root is not None
        flag = "on" if self._fsync else "off"
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self._port} -k {self._root} "
            f"-c fsync={flag} -c synchronous_commit={flag} -c full_page_writes={flag} "
            f"-c max_connections={self._max_connections}"
        )
        log = str(self._root / "server.log")
        timeout = str(_PG_CTL_TIMEOUT)
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            log,
            "-o",
            options,
            "-w",
            "-t",
            timeout,
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once and remove its directory (idempotent)."""
        if self._root is None:
            return
        with contextlib.suppress(PostgresUnavailable):
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        self._remove()

    def log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines of the server's log ('' when there is none)."""
        if self._root is None:
            return ""
        try:
            text = (self._root / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _remove(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            self._port = 0

    def _run(self, tool: str, *args: str) -> None:
        assert self._bindir is not None
        try:
            done = subprocess.run(
                [str(self._bindir / tool), *args],
                capture_output=True,
                text=True,
                timeout=_PG_CTL_TIMEOUT + 30,
                preexec_fn=self._demote,
                cwd=self._root,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise PostgresUnavailable(f"{tool}: {error}") from error
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            tail = self.log_tail()
            raise PostgresUnavailable(
                f"{tool} exited with {done.returncode}: {detail}" + (f"\n{tail}" if tail else "")
            )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
