"""The compactor actor: a thin shell over `Compactor.compact`, answering its session by message.

Protocol:

| in / out | message                                | meaning                                 |
|----------|----------------------------------------|-----------------------------------------|
| in       | `CompactJob(job, request, reply_to)`   | compact this session's history          |
| out      | `CompactionDone(job, outcome=...)`     | the events to persist (never written here) |
| out      | `CompactionDone(job, blocked=...)`     | the pre-compaction hook refused (C3)    |
| out      | `CompactionDone(job, error=...)`       | no checkpoint: any other exception      |

The compactor never writes the log: the session persists the outcome's
events (K2) and only then swaps its memory; the `compaction-failed` events
a `CompactionIneffective` error (or a block) carries are persisted by the
session too. Every job ends with exactly one `CompactionDone` told to
`reply_to`; nothing raises out of a message (`Exception`s become `error`),
so a tell can never kill this actor. Everything `Compactor.compact` does
runs on this actor's thread: the summary calls through the session's
adapter, the waits between them, the reads of recent files and the
pre-compaction hook. The thread is a daemon: nothing here must run at stop.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pykka

from cairn.actors.compactor.errors import CompactionBlocked
from cairn.actors.compactor.service import CompactionOutcome, CompactionRequest, Compactor


class CompactJob:
    """Compact `request` and tell the result to `reply_to`, tagged with `job`."""

    __slots__ = ("job", "reply_to", "request")

    def __init__(self, job: int, request: CompactionRequest, reply_to: pykka.ActorRef[Any]) -> None:
        self.job = job
        self.request = request
        self.reply_to = reply_to


class CompactionDone:
    """The outcome of one job: exactly one of `outcome`, `blocked`, `error` is set."""

    __slots__ = ("blocked", "error", "job", "outcome")

    def __init__(
        self,
        job: int,
        *,
        outcome: CompactionOutcome | None = None,
        blocked: CompactionBlocked | None = None,
        error: Exception | None = None,
    ) -> None:
        self.job = job
        self.outcome = outcome
        self.blocked = blocked
        self.error = error


class CompactorActor(pykka.ThreadingActor):
    """Wraps one session's `Compactor`; started lazily by that session and stopped with it."""

    use_daemon_thread = True

    def __init__(self, compactor: Compactor) -> None:
        super().__init__()
        self._compactor = compactor

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, CompactJob):
            self._run(message)
        return None

    def _run(self, job: CompactJob) -> None:
        try:
            done = CompactionDone(job.job, outcome=self._compactor.compact(job.request))
        except CompactionBlocked as blocked:
            done = CompactionDone(job.job, blocked=blocked)
        except Exception as exc:  # reported to the session, which fails the turn (L2)
            done = CompactionDone(job.job, error=exc)
        # a dead session persisted nothing of this job, so nothing is owed to it
        with contextlib.suppress(pykka.ActorDeadError):
            job.reply_to.tell(done)
