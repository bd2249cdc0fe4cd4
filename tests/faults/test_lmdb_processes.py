"""Process faults on one LMDB store: what several processes, kill -9 and bad files do to it.

Each test runs its faults in child processes (a signal is seen as the child's exit
status, never as a crash of the suite) and reports what it ran on one line,
``fault <test>: cycles=... acknowledged=... lost=... duplicated=... gaps=... hangs=...``,
printed past pytest's capture (and appended as JSON to the file named by
``SHAREDESK_FAULT_REPORT``, if set), and counted in the suite's ``fault cases``
summary; the README's Reliability table cites these lines.
A child that does not finish in time is a hang: the test fails.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from sharedesk.protocol import Event, Person, SharedeskError, StoreFullError, Text, TextDelta
from sharedesk.store import LmdbStore
from tests.faults.counting import FaultCounter
from tests.store.conftest import ROOT, child_env
from tests.store.test_lmdb import ScriptedEnvironment

pytestmark = pytest.mark.slow

AUTHOR = Person(id="fault", label="Fault")
HANG: float = 60  # seconds a child may take before it counts as a hang

Spawn = Callable[..., "subprocess.Popen[bytes]"]
Report = Callable[..., None]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start ``python ARGS...`` children; any still running at teardown is killed and reaped."""
    children: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env(),
            cwd=ROOT,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate()


@pytest.fixture
def report(
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    fault_counter: FaultCounter,
) -> Report:
    """Return ``report(**figures)``: print the test's figures on one line (see the module doc).

    The cycles (or cases) also go to the suite's ``fault cases`` summary.
    """

    def emit(**figures: object) -> None:
        name = request.node.name
        runs = figures.get("cycles", figures.get("cases", 1))
        fault_counter.count(name, runs if isinstance(runs, int) else 1)
        line = f"fault {name}: " + " ".join(f"{key}={value}" for key, value in figures.items())
        with capsys.disabled():
            sys.stderr.write(f"\n{line}\n")
        target = os.environ.get("SHAREDESK_FAULT_REPORT")
        if target:
            with open(target, "a", encoding="utf-8") as out:
                out.write(json.dumps({"test": name, **figures}) + "\n")

    return emit


def wait_for_line(stream: IO[bytes] | None, prefix: bytes) -> bytes:
    """Read the child's lines until one starts with ``prefix``; return it (b"" at EOF)."""
    assert stream is not None
    line = stream.readline()
    while line and not line.startswith(prefix):
        line = stream.readline()
    return line


def kill(child: subprocess.Popen[bytes]) -> bytes:
    """SIGKILL ``child`` and reap it; return the rest of its output (a hang fails the test)."""
    os.kill(child.pid, signal.SIGKILL)
    out, _ = child.communicate(timeout=HANG)
    assert -signal.SIGKILL == child.returncode
    return out


def finish(child: subprocess.Popen[bytes]) -> str:
    """Close the child's stdin (its cue to stop), wait for it, and return its output."""
    out, _ = child.communicate(timeout=HANG)
    assert 0 == child.returncode, out.decode()
    return out.decode()


def stale_slots(scripted: ScriptedEnvironment) -> int:
    """Count reader-table entries of processes that no longer exist."""
    stale = 0
    for line in scripted.env.readers().splitlines()[1:]:
        with contextlib.suppress(ValueError, IndexError):
            pid = int(line.split()[0])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                stale += 1
    return stale


def audit(path: Path) -> tuple[dict[tuple[str, str], int], int, int]:
    """Reopen the store; return (session, id) -> sequence, duplicated ids, gapped sessions."""
    stored: dict[tuple[str, str], int] = {}
    duplicated = gaps = 0
    with LmdbStore(path) as store:
        for session_id in store.sessions():
            events = store.read(session_id)
            if [e.sequence for e in events] != list(range(1, len(events) + 1)):
                gaps += 1
            if store.last_sequence(session_id) != len(events):
                gaps += 1
            duplicated += len(events) - len({e.id for e in events})
            stored.update({(session_id, e.id): e.sequence for e in events if e.sequence})
    return stored, duplicated, gaps


class TestWritersKilled:
    def test_kill_9_of_writers_loses_duplicates_and_gaps_no_acknowledged_event(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """Kill a durable writer (4 threads) after random numbers of acks; reopen after each."""
        path = tmp_path / "desk"
        rng = random.Random(20261201)
        cycles = 30
        acknowledged: dict[tuple[str, str], int] = {}
        for _ in range(cycles):
            child = spawn("-m", "tests.store.crash_writer", str(path), "4", "5")
            assert b"ready\n" == wait_for_line(child.stdout, b"ready")
            assert child.stdout is not None
            seen = [child.stdout.readline() for _ in range(rng.randint(1, 200))]
            for line in b"".join([*seen, kill(child)]).decode().splitlines():
                if line.startswith("ack ") and line.count(" ") == 3:
                    _, session_id, event_id, sequence = line.split(" ")
                    acknowledged[(session_id, event_id)] = int(sequence)

        stored, duplicated, gaps = audit(path)
        lost = sum(1 for key, sequence in acknowledged.items() if stored.get(key) != sequence)
        report(
            cycles=cycles,
            acknowledged=len(acknowledged),
            lost=lost,
            duplicated=duplicated,
            gaps=gaps,
            hangs=0,
        )
        assert len(acknowledged) > cycles
        assert (0, 0, 0) == (lost, duplicated, gaps)


#: Opens the store, reads the whole session ``s`` over and over (so most of its time
#: is spent inside a read transaction); prints ``reading`` after each read.
READER_CHILD = """
import os, sys
from sharedesk.store import LmdbStore
store = LmdbStore(sys.argv[1], durability="relaxed")
while True:
    store.read("s")
    os.write(1, b"reading\\n")
"""

#: Opens the environment with raw py-lmdb first, so its reader table has ``argv[2]``
#: slots for everyone; holds it open until stdin closes.
HOLDER_CHILD = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=5, max_readers=int(sys.argv[2]))
print("ready", flush=True)
sys.stdin.read()
"""

#: Takes every free reader slot (raw py-lmdb, no reader check) and waits to be killed.
SQUATTER_CHILD = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=5)
held = []
try:
    while True:
        held.append(env.begin())
except lmdb.ReadersFullError:
    pass
print(f"took {len(held)}", flush=True)
sys.stdin.read()
"""

#: Opens the store, reads ``s``, appends one event and prints ``RESULT <events read>``.
WORKER_CHILD = """
import sys
from sharedesk.protocol import Event, Person, Text
from sharedesk.store import LmdbStore
with LmdbStore(sys.argv[1], durability="relaxed") as store:
    count = len(store.read("s"))
    store.append("s", [Event(Person(id="w", label="W"), Text("worker"))])
print(f"RESULT {count}", flush=True)
"""


def read_into(store: LmdbStore, counts: list[int]) -> None:
    """Read session ``s`` and append how many events it holds to ``counts``."""
    counts.append(len(store.read("s")))


def append_small(store: LmdbStore, count: int) -> None:
    """Append ``count`` one-event batches (one commit each) to session ``s``."""
    for _ in range(count):
        store.append("s", [Event(AUTHOR, TextDelta("x"))])


class TestReadersKilled:
    def test_readers_killed_mid_read_leave_no_stale_slot_and_the_file_near_its_quiet_size(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """20,000 small appends with readers killed mid-read between them, against none."""
        appends, cycles = 20_000, 30
        quiet = tmp_path / "quiet"
        with LmdbStore(quiet, durability="relaxed") as store:
            append_small(store, appends)
        quiet_size = (quiet / "data.mdb").stat().st_size

        killed = tmp_path / "killed"
        rng = random.Random(7)
        scripted = ScriptedEnvironment()
        with LmdbStore(killed, durability="relaxed", environment=scripted.open) as store:
            append_small(store, 1)
            for cycle in range(cycles):
                child = spawn("-c", READER_CHILD, str(killed))
                for _ in range(rng.randint(1, 20)):  # killed after a random number of reads
                    assert b"reading\n" == wait_for_line(child.stdout, b"reading")
                kill(child)
                append_small(store, appends // cycles - (1 if cycle == 0 else 0))
            append_small(store, appends - len(store.read("s")))
            stale = stale_slots(scripted)
            assert appends == store.last_sequence("s")
        killed_size = (killed / "data.mdb").stat().st_size
        stored, duplicated, gaps = audit(killed)

        report(
            cycles=cycles,
            acknowledged=appends,
            lost=appends - len(stored),
            duplicated=duplicated,
            gaps=gaps,
            hangs=0,
            quiet_bytes=quiet_size,
            killed_bytes=killed_size,
            stale_slots=stale,
        )
        assert (appends, 0, 0) == (len(stored), duplicated, gaps)
        assert 0 == stale
        assert killed_size <= 2 * quiet_size

    def test_more_killed_readers_than_reader_slots_leave_every_process_working(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """16 slots; each cycle one process takes every free slot and one reads, both killed."""
        path, slots, cycles = tmp_path / "desk", 16, 12
        holder = spawn("-c", HOLDER_CHILD, str(path), str(slots))
        assert b"ready\n" == wait_for_line(holder.stdout, b"ready")
        kills = squatted = 0
        scripted = ScriptedEnvironment()
        with LmdbStore(path, durability="relaxed", environment=scripted.open) as store:
            assert slots == scripted.env.max_readers()
            append_small(store, 1)
            for _ in range(cycles):
                squatter = spawn("-c", SQUATTER_CHILD, str(path))
                taken = wait_for_line(squatter.stdout, b"took ")
                assert taken.startswith(b"took ")
                squatted += int(taken.split()[1])
                kill(squatter)
                # The table is full of dead slots. A read while this process holds one
                # needs a second slot: it reclaims them and retries.
                nested: list[int] = []
                scripted.inside_next_read = functools.partial(read_into, store, nested)
                outer = store.last_sequence("s")  # its read runs the nested one inside
                assert [outer] == nested
                reader = spawn("-c", READER_CHILD, str(path))
                assert b"reading\n" == wait_for_line(reader.stdout, b"reading")
                kill(reader)
                kills += 2
                append_small(store, 1)
            out = finish(spawn("-c", WORKER_CHILD, str(path)))
            assert f"RESULT {cycles + 1}" in out
            assert cycles + 2 == store.last_sequence("s")
        finish(holder)
        stored, duplicated, gaps = audit(path)

        report(
            cycles=cycles,
            acknowledged=cycles + 2,
            lost=cycles + 2 - len(stored),
            duplicated=duplicated,
            gaps=gaps,
            hangs=0,
            kills=kills,
            max_readers=slots,
            slots_squatted=squatted,
        )
        assert (cycles + 2, 0, 0) == (len(stored), duplicated, gaps)
        assert kills > slots
        assert squatted > slots


#: Grows the map all the time (raw py-lmdb, in the unnamed database the store never
#: reads): a commit of 8 KiB every 0.2 ms or so, and a full map grows by 16 KiB, so
#: every other process's map keeps falling behind. Stops when stdin closes.
GROWER_CHILD = """
import os, sys, threading, lmdb
env = lmdb.open(sys.argv[1], max_dbs=5, map_size=1 << 20, sync=False, metasync=False)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("growing", flush=True)
blob, index = os.urandom(8192), 0
while not stop.wait(0.0002):
    try:
        with env.begin(write=True) as txn:
            txn.put(b"\\xffgrow%010d" % index, blob)
        index += 1
    except lmdb.MapFullError:
        env.set_mapsize(env.info()["map_size"] + 16384)
    except lmdb.MapResizedError:
        env.set_mapsize(0)
print(f"commits {index}", flush=True)
"""


def start_grower(spawn: Spawn, path: Path) -> subprocess.Popen[bytes]:
    """Create the store, then start a child that grows its map until told to stop."""
    with LmdbStore(path, durability="relaxed") as store:
        append_small(store, 1)
    grower = spawn("-c", GROWER_CHILD, str(path))
    assert b"growing\n" == wait_for_line(grower.stdout, b"growing")
    return grower


def stop_grower(grower: subprocess.Popen[bytes]) -> int:
    """Stop the grower; return how many commits it made."""
    (line,) = [line for line in finish(grower).splitlines() if line.startswith("commits ")]
    return int(line.split()[1])


class TestOpensRacingMapGrowth:
    def test_opens_racing_another_process_growing_the_map_all_succeed(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        path, cycles = tmp_path / "desk", 300
        grower = start_grower(spawn, path)
        failures: list[str] = []
        behind = 0
        for _ in range(cycles):
            try:
                with LmdbStore(path, durability="relaxed", map_size=65536) as store:
                    opened_at = store.map_size()
                    store.read("s", newest_first=True, limit=5)
                    append_small(store, 1)
                    behind += store.map_size() > opened_at
            except SharedeskError as exc:
                failures.append(repr(exc) + repr(exc.__cause__))
        commits = stop_grower(grower)
        stored, duplicated, gaps = audit(path)

        report(
            cycles=cycles,
            acknowledged=cycles + 1,
            lost=cycles + 1 - len(stored),
            duplicated=duplicated,
            gaps=gaps,
            hangs=0,
            failures=len(failures),
            maps_adopted=behind,
            grower_commits=commits,
        )
        assert [] == failures
        assert (cycles + 1, 0, 0) == (len(stored), duplicated, gaps)
        assert behind > 0

    def test_inspect_beside_a_process_growing_the_map_always_succeeds(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        path, runs = tmp_path / "desk", 10
        grower = start_grower(spawn, path)
        codes, errors = [], []
        for _ in range(runs):
            child = spawn("-m", "sharedesk.cli", "inspect", str(path))
            out, _ = child.communicate(timeout=HANG)
            codes.append(child.returncode)
            if child.returncode:
                errors.append(out.decode()[-2000:])
        stop_grower(grower)

        report(cycles=runs, failures=sum(1 for code in codes if code != 0), hangs=0)
        assert [0] * runs == codes, errors


#: Takes LMDB's write lock with raw py-lmdb and holds it mid-write (one put made, not
#: committed) until it reads a line; then aborts.
LOCK_HOLDER_CHILD = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=8)
txn = env.begin(write=True)
txn.put(b"\\xffheld", b"x" * 100)
print("holding", flush=True)
sys.stdin.readline()
txn.abort()
"""

#: The ``environment=`` seam in a child script: ``announcing`` opens an environment that
#: prints ``waiting for the lock`` whenever a write transaction asks for LMDB's lock.
ANNOUNCING = """
import lmdb

class Announcing:
    def __init__(self, env):
        self._env = env
    def __getattr__(self, name):
        return getattr(self._env, name)
    def begin(self, **options):
        if options.get("write"):
            print("waiting for the lock", flush=True)
        return self._env.begin(**options)

announcing = lambda *args, **options: Announcing(lmdb.open(*args, **options))
"""

#: Opens the store and reads ``s`` (printing ``opened``, then ``read <n>``), then
#: appends one event in a thread; its environment (the ``environment=`` seam) prints
#: ``waiting for the lock`` as the append asks for LMDB's write lock. On a line from
#: stdin it waits for the append (``ack s <id> <sequence>``) and closes.
OPENER_CHILD = (
    ANNOUNCING
    + """
import sys, threading
from sharedesk.protocol import Event, Person, Text
from sharedesk.store import LmdbStore
store = LmdbStore(sys.argv[1], durability="relaxed", environment=announcing)
print("opened", flush=True)
print(f"read {len(store.read('s'))}", flush=True)
def append():
    (event,) = store.append("s", [Event(Person(id="o", label="O"), Text("after"))])
    print(f"ack s {event.id} {event.sequence}", flush=True)
appending = threading.Thread(target=append)
appending.start()
sys.stdin.readline()
appending.join()
store.close()
print("closed", flush=True)
"""
)

#: Seconds a child may take to open and read beside a held write lock (the old open
#: waited for the lock: with a holder that never lets go, for ever).
OPEN_BOUND: float = 30


class ChildLines:
    """The lines of a child's output, each awaited with a deadline (a miss fails the test)."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        assert child.stdout is not None
        self._fd = child.stdout.fileno()
        self._buffer = b""

    def expect(self, prefix: bytes, within: float) -> bytes:
        """Return the next line that starts with ``prefix``; the child may be silent for at
        most ``within`` seconds at a time (longer is a hang)."""
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                if line.startswith(prefix):
                    return line
            ready, _, _ = select.select([self._fd], [], [], within)
            assert ready, f"no {prefix!r} line: the child was silent for {within} s (a hang)"
            chunk = os.read(self._fd, 65536)
            assert chunk, f"the child ended before a {prefix!r} line"
            self._buffer += chunk


def tell(child: subprocess.Popen[bytes]) -> None:
    """Send the child the line it waits for."""
    assert child.stdin is not None
    child.stdin.write(b"go\n")
    child.stdin.flush()


class TestWriteLockHeld:
    def test_opens_and_reads_beside_a_held_or_stopped_write_lock_never_wait_for_it(
        self, tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """Another process holds the write lock mid-write (kept, or SIGSTOPped) meanwhile.

        A store opens and reads, and ``sharedesk inspect`` runs, within ``OPEN_BOUND``;
        an append waits for the lock and commits once it is released.
        """
        path, cycles = tmp_path / "desk", 6
        with LmdbStore(path, durability="relaxed") as store:
            append_small(store, 1)
        acknowledged: dict[tuple[str, str], int] = {}
        waited = inspected = 0
        for cycle in range(cycles):
            stopped = cycle % 2 == 1
            holder = spawn("-c", LOCK_HOLDER_CHILD, str(path))
            ChildLines(holder).expect(b"holding", HANG)
            if stopped:
                os.kill(holder.pid, signal.SIGSTOP)
            opener = spawn("-c", OPENER_CHILD, str(path))
            lines = ChildLines(opener)
            lines.expect(b"opened", OPEN_BOUND)
            assert f"read {cycle + 1}".encode() == lines.expect(b"read ", OPEN_BOUND)
            inspect = spawn("-m", "sharedesk.cli", "inspect", str(path))
            inspect.communicate(timeout=OPEN_BOUND)
            assert 0 == inspect.returncode
            inspected += 1
            lines.expect(b"waiting for the lock", HANG)  # the append waits for the holder
            waited += 1
            if stopped:
                os.kill(holder.pid, signal.SIGCONT)
            tell(holder)
            finish(holder)
            tell(opener)
            _, _, event_id, sequence = lines.expect(b"ack ", HANG).decode().split(" ")
            acknowledged[("s", event_id)] = int(sequence)
            lines.expect(b"closed", HANG)
            finish(opener)
        stored, duplicated, gaps = audit(path)
        lost = sum(1 for key, sequence in acknowledged.items() if stored.get(key) != sequence)

        report(
            cycles=cycles,
            acknowledged=len(acknowledged),
            lost=lost,
            duplicated=duplicated,
            gaps=gaps,
            hangs=0,
            stopped_holders=cycles // 2,
            inspect_runs=inspected,
            appends_waited=waited,
        )
        assert (cycles, 0, 0, 0) == (len(acknowledged), lost, duplicated, gaps)
        assert cycles + 1 == len(stored)


#: Opens a (damaged) store (``argv[2] == "verify"``: with ``verify=True``), reads every
#: session, prints ``RESULT ok <digest>`` or ``RESULT error <type>``. The parent judges
#: its exit status.
DAMAGED_CHILD = """
import hashlib, sys
from sharedesk.protocol import SharedeskError
from sharedesk.store import LmdbStore
try:
    with LmdbStore(sys.argv[1], durability="relaxed", verify=sys.argv[2] == "verify") as store:
        digest = hashlib.sha256()
        for session_id in store.sessions():
            for event in store.read(session_id):
                digest.update(f"{session_id} {event.id} {event.sequence} {event.body}".encode())
    print("RESULT ok " + digest.hexdigest(), flush=True)
except SharedeskError as exc:
    print("RESULT error " + type(exc).__name__, flush=True)
"""

Damage = Callable[[Any, int], None]


def truncate_to(size: int) -> Damage:
    return lambda file, _size: file.truncate(size)


def overwrite(offset: int, length: int | None, *, seed: int | None) -> Damage:
    """Overwrite ``length`` bytes (None: to the end) at ``offset`` with zeros or seeded bytes."""

    def damage(file: Any, size: int) -> None:
        count = size - offset if length is None else length
        file.seek(offset)
        file.write(bytes(count) if seed is None else random.Random(seed).randbytes(count))

    return damage


def garbage_page(rng: random.Random, pages: int) -> Damage:
    """Overwrite one page (drawn from ``rng``, past the meta pages) with ``rng``'s bytes."""
    at = rng.randrange(2, pages) * 4096
    garbage = rng.randbytes(4096)

    def damage(file: Any, _size: int) -> None:
        file.seek(at)
        file.write(garbage)

    return damage


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A closed store of 300 events in 7 sessions, and the digest its reader prints."""
    path = tmp_path_factory.mktemp("pristine") / "desk"
    rng = random.Random(3)
    with LmdbStore(path, durability="relaxed") as store:
        for index in range(300):
            store.append(f"s/{index % 7}", [Event(AUTHOR, Text("x" * rng.randint(10, 3000)))])
        digest = hashlib.sha256()
        for session_id in store.sessions():
            for event in store.read(session_id):
                digest.update(f"{session_id} {event.id} {event.sequence} {event.body}".encode())
    return path, digest.hexdigest()


def run_damaged(
    pristine: tuple[Path, str],
    tmp_path: Path,
    spawn: Spawn,
    cases: dict[str, Damage],
    *,
    verify: bool = False,
) -> dict[str, str]:
    """Damage a copy of the pristine store per case and read it in a child.

    Returns each case's outcome: ``"intact"`` (every event read back unchanged) or the
    error type. A signal, a non-zero exit or a changed read fails the test.
    """
    source, digest = pristine
    outcomes: dict[str, str] = {}
    for name, damage in cases.items():
        path = tmp_path / name
        shutil.copytree(source, path)
        data = path / "data.mdb"
        with open(data, "r+b") as file:
            damage(file, data.stat().st_size)
        child = spawn("-c", DAMAGED_CHILD, str(path), "verify" if verify else "trust")
        out, _ = child.communicate(timeout=HANG)
        assert 0 == child.returncode, f"{name}: exit status {child.returncode}"
        (result,) = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
        outcome = result.removeprefix("RESULT ")
        assert outcome in (f"ok {digest}", "error CorruptRecordError", "error StoreIOError"), name
        outcomes[name] = "intact" if outcome.startswith("ok ") else outcome.split()[1]
    return outcomes


class TestDamagedFiles:
    def test_a_truncated_file_is_a_typed_error_or_reads_intact_never_a_signal(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        size = (pristine[0] / "data.mdb").stat().st_size
        points = [1, 100, 4095, 4096, 4097, 8192, 8193, size // 4, size // 2]
        points += [size - 8192, size - 4096, size - 1]
        outcomes = run_damaged(
            pristine, tmp_path, spawn, {f"truncated-{at}": truncate_to(at) for at in points}
        )

        errors = sum(1 for outcome in outcomes.values() if outcome != "intact")
        report(cases=len(outcomes), typed_errors=errors, signals=0, hangs=0)
        assert "CorruptRecordError" == outcomes[f"truncated-{size // 2}"]

    def test_a_zeroed_file_is_corrupt_record_error(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        cases = {
            "zeroed": overwrite(0, None, seed=None),
            "zeroed-meta-pages": overwrite(0, 8192, seed=None),
            "zeroed-first-meta": overwrite(0, 4096, seed=None),
            "zeroed-second-meta": overwrite(4096, 4096, seed=None),
        }
        outcomes = run_damaged(pristine, tmp_path, spawn, cases)

        report(cases=len(outcomes), signals=0, hangs=0)
        assert {name: "CorruptRecordError" for name in cases} == outcomes

    def test_random_garbage_over_the_file_or_its_meta_pages_is_corrupt_record_error(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        cases = {
            "garbage": overwrite(0, None, seed=1),
            "garbage-meta-pages": overwrite(0, 8192, seed=2),
            "garbage-first-meta": overwrite(0, 4096, seed=3),
        }
        outcomes = run_damaged(pristine, tmp_path, spawn, cases)

        report(cases=len(outcomes), signals=0, hangs=0)
        assert {name: "CorruptRecordError" for name in cases} == outcomes

    def test_a_garbage_page_inside_the_file_is_a_typed_error_or_reads_intact_when_verified(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """With ``verify`` every page is walked before LMDB reads any."""
        size = (pristine[0] / "data.mdb").stat().st_size
        rng = random.Random(11)
        cases = {}
        for index in range(16):
            at = rng.randrange(2, size // 4096) * 4096
            cases[f"garbage-page-{index}-at-{at}"] = overwrite(at, 4096, seed=100 + index)
        outcomes = run_damaged(pristine, tmp_path, spawn, cases, verify=True)

        errors = sum(1 for outcome in outcomes.values() if outcome != "intact")
        report(cases=len(outcomes), typed_errors=errors, signals=0, hangs=0)
        assert errors > 0

    def test_a_damaged_page_inside_the_file_unverified_is_a_typed_error_or_reads_intact(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        """Without ``verify``, a damaged page inside a file of the right size is no signal.

        Garbage over a whole page, or a few garbled bytes in a page's header and node
        offsets, at random pages. A garbled leaf used to trip LMDB's own assertion
        (``IS_LEAF(mp)`` in ``mdb_cursor_next``) and abort the reader; the open's walk
        of the branch pages refuses it first.
        """
        pages = (pristine[0] / "data.mdb").stat().st_size // 4096
        cases: dict[str, Damage] = {}
        for index in range(40):
            cases[f"garbage-page-{index}"] = garbage_page(random.Random(1000 + index), pages)
        for index in range(8):
            rng = random.Random(2000 + index)
            at = rng.randrange(2, pages) * 4096 + rng.randrange(0, 60)
            cases[f"garbled-header-{index}-at-{at}"] = overwrite(at, 4, seed=300 + index)
        outcomes = run_damaged(pristine, tmp_path, spawn, cases)

        counted = {kind: list(outcomes.values()).count(kind) for kind in set(outcomes.values())}
        report(cases=len(outcomes), signals=0, hangs=0, **counted)
        assert set(outcomes.values()) <= {"intact", "CorruptRecordError", "StoreIOError"}

    def test_inspect_on_a_damaged_file_exits_with_an_error_not_a_signal(
        self, pristine: tuple[Path, str], tmp_path: Path, spawn: Spawn, report: Report
    ) -> None:
        size = (pristine[0] / "data.mdb").stat().st_size
        cases = {
            "truncated-half": truncate_to(size // 2),
            "truncated-to-meta": truncate_to(8192),
            "zeroed": overwrite(0, None, seed=None),
            "garbage": overwrite(0, None, seed=1),
            "garbage-pages": overwrite(8192, None, seed=4),
        }
        codes = {}
        for name, damage in cases.items():
            path = tmp_path / name
            shutil.copytree(pristine[0], path)
            with open(path / "data.mdb", "r+b") as file:
                damage(file, size)
            child = spawn("-m", "sharedesk.cli", "inspect", str(path))
            child.communicate(timeout=HANG)
            codes[name] = child.returncode

        report(cases=len(cases), signals=sum(1 for code in codes.values() if code < 0), hangs=0)
        assert {name: 2 for name in cases} == codes


@contextlib.contextmanager
def small_disk(path: Path) -> Iterator[str]:
    """Mount a 2 MiB tmpfs at ``path`` if this process may (root); yield ``"tmpfs"``.

    Yields ``"max_map_size"`` when it may not (the test then caps the map instead).
    """
    path.mkdir()
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
            capture_output=True,
            check=False,
        )
        mounted = done.returncode == 0
    try:
        yield "tmpfs" if mounted else "max_map_size"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


class TestFullDisk:
    def test_a_full_disk_refuses_appends_with_store_full_error_and_keeps_what_it_acknowledged(
        self, tmp_path: Path, report: Report
    ) -> None:
        """Appends until the disk (a 2 MiB tmpfs, else a 1 MiB map ceiling) is full."""
        with small_disk(tmp_path / "disk") as mode:
            path = tmp_path / "disk" / "desk"
            options: dict[str, Any] = (
                {} if mode == "tmpfs" else {"map_size": 256 * 1024, "max_map_size": 1 << 20}
            )
            acknowledged: dict[tuple[str, str], int] = {}
            refused = disk_full = 0
            with LmdbStore(path, **options) as store:
                for index in range(5000):
                    session_id = f"s/{index % 3}"
                    try:
                        (stored,) = store.append(session_id, [Event(AUTHOR, Text("f" * 1500))])
                    except StoreFullError as exc:
                        refused += 1
                        disk_full += exc.disk_full
                        if refused >= 20:
                            break
                    else:
                        acknowledged[(session_id, stored.id)] = stored.sequence or 0
            stored_events, duplicated, gaps = audit(path)
            with LmdbStore(path, **options) as store, pytest.raises(StoreFullError):
                store.append("s/0", [Event(AUTHOR, Text("f" * 1500))])
            lost = sum(1 for key, seq in acknowledged.items() if stored_events.get(key) != seq)

            report(
                mode=mode,
                cycles=refused,
                acknowledged=len(acknowledged),
                lost=lost,
                duplicated=duplicated,
                gaps=gaps,
                hangs=0,
            )
            assert acknowledged != {}
            assert 20 == refused
            assert (0, 0, 0) == (lost, duplicated, gaps)
            assert len(stored_events) == len(acknowledged)
            assert (mode == "tmpfs") == (disk_full == refused)
