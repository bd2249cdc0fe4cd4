"""``desk``: a realistic shared desk: people post, agents take turns and commit replies.

One Hub on LMDB. The operator opens the desk and a few threads. Each person posts in
the channel or a thread from a thread of its own; each agent, from its own thread, takes
``hub.turn`` (alternating between the channel and a thread), then commits a reply with
``turn.commit``, and looks at its view of that conversation. Reported: turn and commit
latency percentiles, post latency, delta sizes, and three integrity counts that must
stay 0: replies offered back to their own author, rows delivered twice to one agent in
one conversation, and rows (written by others) that an agent's view showed after its
first turn there but no turn ever offered it (counted once every agent has taken a
last turn in each of its conversations, after the run).
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from typing import Any

from bench.harness import BenchRun, open_hub
from bench.options import Option, settle
from bench.report import measurement, percentile

NAME = "desk"
HELP = "agents and people on one desk: hub.turn latency percentiles and delta sizes"

DESK = "desk"


OPTIONS = (
    Option("--agents", 4, "agents taking turns", quick=2),
    Option("--people", 2, "people posting", quick=1),
    Option("--rounds", 150, "turns per agent and posts per person", quick=6),
    Option("--threads-on-desk", 3, "thread roots on the desk", quick=1),
    Option("--durability", "durable", "store durability", choices=("durable", "relaxed")),
    Option("--seed", 7, "random seed"),
)


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    from sharedesk import Agent, Conversation, Operator, Person
    from sharedesk.protocol import same_participant

    hub = open_hub(run_.fresh_dir("desk") / "store", args.durability)
    try:
        session = hub.session(DESK)
        session.post(Operator(), "Welcome to the desk: triage today's incidents.")
        roots = [
            session.post(Operator(), f"Thread {k}: incident {k} follow-up").sequence
            for k in range(args.threads_on_desk)
        ]
        conversations: list[Any] = [None] + [Conversation(DESK, thread_root=r) for r in roots]
        agents = [Agent(id=f"agent{k}", label=f"Agent {k}") for k in range(args.agents)]
        people = [Person(id=f"person{k}", label=f"Person {k}") for k in range(args.people)]
        lock = threading.Lock()
        turn_ns: list[int] = []
        commit_ns: list[int] = []
        post_ns: list[int] = []
        delta_sizes: list[int] = []
        reasons: dict[str, int] = {}
        offered_back = [0]
        twice = [0]
        # Per (agent, conversation slot): rows by others its views showed, and offered.
        shown: dict[tuple[int, int], set[int]] = {}
        offered: dict[tuple[int, int], set[int]] = {}
        errors: list[BaseException] = []
        total = args.rounds * (args.agents + args.people)

        def agent_loop(index: int, advance: Any) -> None:
            agent = agents[index]
            rng = random.Random(args.seed * 1000 + index)
            mine: set[int] = set()
            seen: dict[int, set[int]] = {}
            for i in range(args.rounds):
                slot = 0 if i % 2 == 0 else rng.randrange(len(conversations))
                conversation = conversations[slot]
                t0 = time.perf_counter_ns()
                turn = hub.turn(DESK, agent, conversation)
                t1 = time.perf_counter_ns()
                stored = turn.commit(f"{agent.label} on item {i}")
                t2 = time.perf_counter_ns()
                delivered = {m.sequence for m in turn.messages}
                bad_back = len(delivered & mine) if turn.reason is None else 0
                already = seen.setdefault(slot, set())
                dup = len(delivered & already) if turn.reason is None else 0
                already.update(delivered)
                if stored is not None and stored.sequence is not None:
                    mine.add(stored.sequence)
                account(index, slot, turn)
                with lock:
                    turn_ns.append(t1 - t0)
                    commit_ns.append(t2 - t1)
                    delta_sizes.append(len(turn.messages))
                    key = "delta" if turn.reason is None else str(turn.reason)
                    reasons[key] = reasons.get(key, 0) + 1
                    offered_back[0] += bad_back
                    twice[0] += dup
                advance(1)

        def account(index: int, slot: int, turn: Any) -> None:
            """Record what ``turn`` offered and what the agent's view shows right after."""
            agent = agents[index]
            key = (index, slot)
            if turn.reason not in (None, "initial"):  # a reinitialize starts over
                shown.pop(key, None)
                offered.pop(key, None)
            view = hub.view(DESK, agent, conversations[slot])
            theirs = {m.sequence for m in turn.messages if not same_participant(m.author, agent)}
            offered.setdefault(key, set()).update(theirs)
            shown.setdefault(key, set()).update(
                m.sequence for m in view.messages if not same_participant(m.author, agent)
            )

        def person_loop(index: int, advance: Any) -> None:
            person = people[index]
            rng = random.Random(args.seed * 2000 + index)
            for i in range(args.rounds):
                parent = None if rng.random() < 0.5 else rng.choice(roots)
                t0 = time.perf_counter_ns()
                session.post(person, f"{person.label} update {i}", parent=parent)
                with lock:
                    post_ns.append(time.perf_counter_ns() - t0)
                advance(1)

        def guarded(fn: Any, index: int, advance: Any) -> None:
            try:
                fn(index, advance)
            except BaseException as exc:
                errors.append(exc)

        with run_.progress(f"desk: {args.agents} agents, {args.people} people", total) as advance:
            workers = [
                threading.Thread(target=guarded, args=(agent_loop, k, advance), daemon=True)
                for k in range(args.agents)
            ] + [
                threading.Thread(target=guarded, args=(person_loop, k, advance), daemon=True)
                for k in range(args.people)
            ]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        for index, slot in sorted(offered):  # a last turn offers what came since
            turn = hub.turn(DESK, agents[index], conversations[slot])
            turn.commit()
            account(index, slot, turn)
        never_offered = sum(len(shown[key] - offered[key]) for key in shown)
    finally:
        hub.close()

    params = {
        "agents": args.agents,
        "people": args.people,
        "rounds": args.rounds,
        "durability": args.durability,
    }
    for operation, samples, note in (
        ("turn", turn_ns, "hub.turn: delta since the agent's last commit"),
        ("commit", commit_ns, "turn.commit(reply): reply and sharing state, one durable step"),
        ("post", post_ns, "session.post by a person"),
    ):
        run_.measurements.append(
            measurement(
                scenario=NAME,
                system="sharedesk",
                operation=operation,
                label=f"desk {operation}",
                ops=len(samples),
                seconds=seconds,
                latencies_ns=samples,
                params=params,
                note=note + "; ops/s over the whole desk run",
            )
        )
    ordered = sorted(delta_sizes)
    run_.figures["desk delta size median/p99/max"] = (
        f"{percentile(ordered, 0.5):g}/{percentile(ordered, 0.99):g}/{ordered[-1]:g}"
        if ordered
        else "-"
    )
    run_.figures["desk turn reasons"] = reasons
    run_.figures["desk replies offered back to their author (must be 0)"] = offered_back[0]
    run_.figures["desk rows delivered twice in one conversation (must be 0)"] = twice[0]
    run_.figures["desk rows shown in a view but never offered by a turn (must be 0)"] = (
        never_offered
    )
