"""``import sharedesk`` imports only the core dependencies; optional ones load on first use."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import sharedesk

#: Top-level packages only an extra installs.
OPTIONAL = ("httpx", "httpcore", "anyio", "h11", "rich", "matplotlib", "psycopg", "psycopg_pool")


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


class TestImportSharedesk:
    def test_it_imports_no_optional_dependency_beyond_the_core_ones(self) -> None:
        # structlog imports rich itself when rich is installed: only what sharedesk adds
        # on top of the core dependencies counts.
        added = run(
            "import sys\n"
            "import msgspec, lmdb, pykka, structlog\n"
            "core = set(sys.modules)\n"
            "import sharedesk\n"
            "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - core})))\n"
        ).split()

        assert [] == [name for name in added if name in OPTIONAL]

    def test_it_loads_lmdb_the_runs_api_and_asyncio_front_end_only_when_used(self) -> None:
        loaded = run(
            "import sys, sharedesk\n"
            "names = ('lmdb', 'sharedesk.store.lmdb', 'sharedesk.runs', 'sharedesk.actors.aio')\n"
            "print('before:', *(name for name in names if name in sys.modules))\n"
            "sharedesk.LmdbStore, sharedesk.SessionManager, sharedesk.AsyncHub\n"
            "print('after:', *(name for name in names if name in sys.modules))\n"
        ).split("\n")

        assert [
            "before:",
            "after: lmdb sharedesk.store.lmdb sharedesk.runs sharedesk.actors.aio",
        ] == loaded

    def test_it_loads_psycopg_only_for_a_hub_on_postgresql(self) -> None:
        loaded = run(
            "import sys, sharedesk\n"
            "from sharedesk import AsyncHub, Hub\n"
            "Hub.open(None).close()\n"
            "print('psycopg' in sys.modules, 'psycopg_pool' in sys.modules)\n"
        )

        assert "False False" == loaded

    def test_a_hub_on_postgresql_without_psycopg_names_the_extra(self) -> None:
        said = run(
            "import sys; sys.modules['psycopg'] = None\n"
            "from sharedesk import Hub\n"
            "try:\n"
            "    Hub.open('postgresql://127.0.0.1:1/desks')\n"
            "except ImportError as exc:\n"
            "    print(exc)\n"
        )

        assert "pip install 'sharedesk[postgres]'" in said

    def test_it_works_with_every_optional_dependency_missing(self) -> None:
        blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in OPTIONAL)
        missing = run(
            f"import sys; {blocked}\n"
            "import sharedesk\n"
            "missing = []\n"
            "for name in sharedesk.__all__:\n"
            "    try:\n"
            "        getattr(sharedesk, name)\n"
            "    except ImportError as exc:\n"
            "        missing.append(f'{name}: {exc}')\n"
            "print('|'.join(missing))\n"
        )

        assert (
            "OpenAIChatAdapter: OpenAIChatAdapter needs httpx, which is not installed: "
            "pip install 'sharedesk[http]'|"
            "PostgresStore: PostgresStore needs psycopg, which is not installed: "
            "pip install 'sharedesk[postgres]'"
        ) == missing

    def test_the_servers_package_imports_nothing_optional_and_starts_no_thread(self) -> None:
        found = run(
            "import sys, threading\n"
            "import msgspec, lmdb, pykka, structlog\n"  # structlog imports rich itself
            "before = set(sys.modules)\n"
            "import sharedesk.servers\n"
            f"optional = {OPTIONAL!r}\n"
            "added = {m.split('.')[0] for m in set(sys.modules) - before}\n"
            "print(sorted(added & set(optional)), threading.active_count())\n"
        )

        assert "[] 1" == found

    def test_the_postgres_store_resolves_when_its_extra_is_installed(self) -> None:
        from sharedesk.store.postgres import PostgresStore

        assert PostgresStore is sharedesk.PostgresStore is sharedesk.store.PostgresStore

    def test_the_adapter_resolves_when_its_extra_is_installed(self) -> None:
        from sharedesk.adapters.openai_chat import OpenAIChatAdapter

        assert OpenAIChatAdapter is sharedesk.OpenAIChatAdapter

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        assert not hasattr(sharedesk, "NoSuchName")


class TestVersion:
    def test_version_is_the_installed_package_version(self) -> None:
        assert version("sharedesk") == sharedesk.__version__
