"""RunQueue: per-session FIFO, concurrency and waiting limits, drain, status, close."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedesk.actors.hub import Hub
from sharedesk.protocol.errors import (
    QueueClosed,
    QueueFull,
    RunCancelled,
    RunFailed,
    ValidationError,
)
from sharedesk.protocol.events import RunFinished, RunStarted, Text
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import RunQueueStatus, ScriptedAdapter, SessionManager
from sharedesk.runs.queue import RunQueue
from tests.runs.conftest import BlockingAdapter, CoroutineExecute, FailingAdapter


@pytest.fixture
def queue(store: EventStore) -> Iterator[RunQueue]:
    """A queue with the default limits, closed after the test."""
    with RunQueue(store) as run_queue:
        yield run_queue


ROOT = Path(__file__).resolve().parents[2]

#: A process waiting on the result of a run whose adapter never returns. It prints the
#: run id once the adapter runs, then waits; at exit its Hub stores in ``path``.
WAITING_ON_A_RUN = """
    import sys, threading
    from sharedesk import Hub

    class Stuck:
        name = "stuck"
        native_continuation = False
        def execute(self, run, session, emit, opts):
            print(run.id, flush=True)
            threading.Event().wait()

    hub = Hub.open(sys.argv[1])
    hub.submit_run("s1", Stuck(), "hi").result()
"""


def queue_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sharedesk-queue-")]


class TestSubmit:
    def test_a_submitted_run_resolves_to_its_result(self, queue: RunQueue) -> None:
        future = queue.submit("s1", ScriptedAdapter(["hi"]), "hello")

        result = future.result(10)

        assert ("hi", future.run_id, "s1") == (result.output, result.run_id, result.session_id)

    def test_the_run_exists_as_soon_as_it_is_submitted(
        self, store: EventStore, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "first")
        second = queue.submit("s1", blocking, "second")

        assert "pending" == SessionManager.get_run(store, second.run_id).status

    def test_runs_of_one_session_execute_one_at_a_time_in_submission_order(
        self, store: EventStore, queue: RunQueue
    ) -> None:
        adapter = ScriptedAdapter([f"r{i}" for i in range(6)])

        futures = [queue.submit("s1", adapter, f"m{i}") for i in range(6)]
        assert queue.drain(10)

        assert [f"m{i}" for i in range(6)] == [c.input[0]["content"] for c in adapter.calls]
        lifecycle = [
            (type(e.body), e.run_id)
            for e in store.read("s1")
            if isinstance(e.body, RunStarted | RunFinished)
        ]
        expected = [(kind, f.run_id) for f in futures for kind in (RunStarted, RunFinished)]
        assert expected == lifecycle

    def test_runs_submitted_from_many_threads_execute_in_the_order_their_inputs_were_stored(
        self, store: EventStore, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        adapter = ScriptedAdapter([f"r{i}" for i in range(8)])
        queue.submit("s1", blocking, "gate")
        submitters = [
            threading.Thread(target=queue.submit, args=("s1", adapter, f"m{i}")) for i in range(8)
        ]
        for thread in submitters:
            thread.start()
        for thread in submitters:
            thread.join(10)

        blocking.release.set()
        assert queue.drain(10)

        stored = [
            e.body.content
            for e in store.read("s1")
            if isinstance(e.body, Text) and e.body.content.startswith("m")
        ]
        assert stored == [call.input[0]["content"] for call in adapter.calls]

    def test_options_reach_the_run(self, store: EventStore, queue: RunQueue) -> None:
        adapter = ScriptedAdapter(["a", "b"])
        queue.submit("s1", adapter, "first").result(10)

        queue.submit(
            "s1",
            adapter,
            "second",
            continuation="replay",
            continuation_opts={"max_messages": 1},
            adapter_opts={"k": 1},
        ).result(10)

        call = adapter.calls[1]
        assert call.transcript is not None
        assert (["a"], {"k": 1}) == ([m.content for m in call.transcript.messages], call.opts)

    def test_a_failing_run_fails_its_future(self, queue: RunQueue) -> None:
        future = queue.submit("s1", FailingAdapter(), "hello")

        assert isinstance(future.exception(10), RunFailed)

    def test_bad_input_is_refused_at_submit_and_nothing_is_queued(
        self, store: EventStore, queue: RunQueue
    ) -> None:
        with pytest.raises(ValidationError):
            queue.submit("s1", ScriptedAdapter(["hi"]), [])

        assert (0, 0) == (queue.status("s1").queued, store.last_sequence("s1"))

    @pytest.mark.parametrize(
        ("adapter", "options"),
        [
            (ScriptedAdapter(["hi"]), {"continuation": "native"}),
            (ScriptedAdapter(["hi"]), {"continuation_opts": {"limit": -1}}),
            (CoroutineExecute(), {}),
        ],
        ids=["native-without-native", "bad-budget", "coroutine-execute"],
    )
    def test_options_the_adapter_cannot_serve_are_refused_at_submit_and_nothing_is_written(
        self, store: EventStore, queue: RunQueue, adapter: Any, options: dict[str, Any]
    ) -> None:
        with pytest.raises(ValidationError):
            queue.submit("s1", adapter, "hello", **options)

        assert (0, 0) == (queue.status("s1").queued, store.last_sequence("s1"))


class TestLimits:
    def test_a_second_run_waits_while_the_first_runs(
        self, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "first")
        queue.submit("s1", blocking, "second")
        assert blocking.wait_started(1)

        expected = RunQueueStatus(
            session_id="s1", running=1, queued=1, max_concurrent_runs=1, max_queued_runs=100
        )
        assert expected == queue.status("s1")

    def test_past_max_queued_runs_submit_raises_queue_full_and_writes_nothing(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        with RunQueue(store, max_queued_runs=1) as small:
            small.submit("s1", blocking, "runs")
            small.submit("s1", blocking, "waits")
            assert blocking.wait_started(1)
            last = store.last_sequence("s1")

            with pytest.raises(QueueFull) as info:
                small.submit("s1", blocking, "refused")

            assert ("s1", 1) == (info.value.session_id, info.value.max_queued_runs)
            assert last == store.last_sequence("s1")
            blocking.release.set()

    def test_max_concurrent_runs_lets_that_many_runs_of_a_session_run_at_once(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        with RunQueue(store, max_concurrent_runs=2) as wide:
            for i in range(3):
                wide.submit("s1", blocking, f"m{i}")

            assert blocking.wait_started(2)
            assert (2, 1) == (wide.status("s1").running, wide.status("s1").queued)
            blocking.release.set()

    def test_sessions_do_not_wait_for_each_other(
        self, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "blocked")
        assert blocking.wait_started(1)

        result = queue.submit("s2", ScriptedAdapter(["free"]), "hello").result(10)

        assert "free" == result.output

    @pytest.mark.parametrize(
        "limits",
        [
            {"max_concurrent_runs": 0},
            {"max_queued_runs": -1},
            {"max_concurrent_runs": True},
            {"max_queued_runs": 1.5},
        ],
    )
    def test_limits_out_of_range_are_refused(
        self, store: EventStore, limits: dict[str, object]
    ) -> None:
        with pytest.raises(ValidationError):
            RunQueue(store, **limits)  # type: ignore[arg-type]


class TestDrainAndStatus:
    def test_drain_returns_false_while_a_run_is_still_running(
        self, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "blocked")

        assert False is queue.drain(0.05)

    def test_drain_returns_true_once_every_run_ended(
        self, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "blocked")
        blocking.release.set()

        assert True is queue.drain(10)

    def test_a_drained_session_reports_nothing_running_or_queued(self, queue: RunQueue) -> None:
        queue.submit("s1", ScriptedAdapter(["hi"]), "hello")
        queue.drain(10)

        assert (0, 0) == (queue.status("s1").running, queue.status("s1").queued)


class TestCancel:
    def test_cancelling_a_waiting_future_records_the_run_as_cancelled(
        self, store: EventStore, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "first")
        waiting = queue.submit("s1", blocking, "second")

        assert waiting.cancel()

        assert "cancelled" == SessionManager.get_run(store, waiting.run_id).status
        assert 0 == queue.status("s1").queued

    def test_a_cancelled_waiting_run_never_reaches_the_adapter(
        self, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        queue.submit("s1", blocking, "first")
        queue.submit("s1", blocking, "second").cancel()

        blocking.release.set()
        queue.drain(10)

        assert ["first"] == blocking.inputs

    def test_cancelling_a_running_run_fails_its_future_with_run_cancelled(
        self, store: EventStore, queue: RunQueue, blocking: BlockingAdapter
    ) -> None:
        future = queue.submit("s1", blocking, "first")
        assert blocking.wait_started(1)

        SessionManager.cancel_run(store, future.run_id)

        assert isinstance(future.exception(10), RunCancelled)


class TestClose:
    def test_close_cancels_waiting_runs(self, store: EventStore, blocking: BlockingAdapter) -> None:
        run_queue = RunQueue(store)
        run_queue.submit("s1", blocking, "first")
        waiting = run_queue.submit("s1", blocking, "second")
        assert blocking.wait_started(1)

        run_queue.close(timeout=0.05)

        assert waiting.cancelled()
        assert "cancelled" == SessionManager.get_run(store, waiting.run_id).status

    def test_close_cancels_runs_still_running_after_its_bound(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run_queue = RunQueue(store)
        running = run_queue.submit("s1", blocking, "first")
        assert blocking.wait_started(1)

        run_queue.close(timeout=0.05)

        assert isinstance(running.exception(10), RunCancelled)

    def test_close_waits_for_running_runs_that_end_within_its_bound(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run_queue = RunQueue(store)
        running = run_queue.submit("s1", blocking, "first")
        assert blocking.wait_started(1)
        blocking.release.set()

        run_queue.close(timeout=10)

        assert "late reply" == running.result(0).output

    def test_close_stops_every_thread_the_queue_started(
        self, store: EventStore, blocking: BlockingAdapter
    ) -> None:
        run_queue = RunQueue(store, max_concurrent_runs=2)
        for session_id in ("s1", "s2"):
            run_queue.submit(session_id, blocking, "x")
        assert blocking.wait_started(2)

        run_queue.close(timeout=0.05)

        assert [] == queue_threads()

    def test_submit_after_close_raises_queue_closed_and_writes_nothing(
        self, store: EventStore
    ) -> None:
        run_queue = RunQueue(store)
        run_queue.close()

        with pytest.raises(QueueClosed):
            run_queue.submit("s1", ScriptedAdapter(["hi"]), "hello")

        assert 0 == store.last_sequence("s1")
        assert run_queue.status("s1").closed


class TestOverEveryStore:
    def test_queued_runs_execute_in_order_and_replay_earlier_replies(
        self, any_store: EventStore
    ) -> None:
        """The last run replays every earlier text, in stored order, but its own input."""
        adapter = ScriptedAdapter(["r0", "r1", "r2"])
        with RunQueue(any_store) as run_queue:
            for i in range(3):
                run_queue.submit("s1", adapter, f"m{i}", continuation="replay")
            assert run_queue.drain(10)

        assert ["m0", "m1", "m2"] == [call.input[0]["content"] for call in adapter.calls]
        stored = [e.body.content for e in any_store.read("s1") if isinstance(e.body, Text)]
        last = adapter.calls[-1].transcript
        assert last is not None
        assert [t for t in stored if t not in ("m2", "r2")] == [m.content for m in last.messages]


class TestThroughTheHub:
    def test_hub_submit_run_drain_and_status_use_the_run_queue(self) -> None:
        with Hub.open(None, max_queued_runs=5) as hub:
            future = hub.submit_run("s1", ScriptedAdapter(["hi"]), "hello")

            assert "hi" == future.result(10).output
            assert hub.drain(10)
            expected = RunQueueStatus(
                session_id="s1", running=0, queued=0, max_concurrent_runs=1, max_queued_runs=5
            )
            assert expected == hub.status("s1")

    def test_closing_the_hub_cancels_its_waiting_runs(self, blocking: BlockingAdapter) -> None:
        hub = Hub.open(None)
        hub.submit_run("s1", blocking, "first")
        waiting = hub.submit_run("s1", blocking, "second")
        assert blocking.wait_started(1)
        # The running run ends as soon as close has cancelled the waiting one.
        waiting.add_done_callback(lambda _: blocking.release.set())

        hub.close()

        assert waiting.cancelled()
        assert ["first"] == blocking.inputs


class TestInterrupt:
    def test_ctrl_c_while_waiting_on_a_runs_result_ends_the_process_within_two_seconds(
        self, tmp_path: Path
    ) -> None:
        process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WAITING_ON_A_RUN), str(tmp_path / "desk")],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        run_id = process.stdout.readline().strip()
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
            raise AssertionError(f"still running 2 s after Ctrl-C; stderr: {err[-2000:]}") from None

        assert (-signal.SIGINT, True) == (process.returncode, "KeyboardInterrupt" in err)
        with Hub.open(tmp_path / "desk") as hub:
            assert "cancelled" == SessionManager.get_run(hub, run_id).status
