"""The provider actor: a thin shell that runs one adapter's stream and tells it back, item by item.

Protocol (all messages immutable; the session never blocks on this actor):

| in / out | message                                   | when                                   |
|----------|-------------------------------------------|----------------------------------------|
| in       | `StreamJob(job, request, reply_to, cancel)` | the session sends a request           |
| out      | `ProviderItem(job, item)`                 | each text, reasoning, tool call, usage |
| out      | `ProviderDone(job, seconds)`              | the stream ended normally              |
| out      | `ProviderFailed(job, ..., delivered)`     | the adapter raised                     |

Every job ends with exactly one `ProviderDone` or `ProviderFailed`, told to
`reply_to` (the session actor). `delivered` says whether any output of the
job crossed the boundary before the error (R2): this actor forwarded an
item, or the adapter says its own stream had delivered output. `seconds` is
the time spent inside the adapter, so a host can tell the provider's time
from its own. Setting `cancel` stops forwarding at the next item (the job
then ends with a `ProviderFailed` of class `network`, message `cancelled`).

The adapter is the host's code, so what comes out of it is checked where it
enters: every item must be a well-formed `ProviderOutput` (a JSON round
trip, as the log will make; else the job fails, class `server`), a
`ProviderFailure` keeps its message but an unknown class becomes `server`
and a status outside 100-599 none. The actor never raises out of a message:
any other exception, BaseExceptions included (let through, pykka would stop
every actor of the process), is a failure of class `server` with the
exception's class and its own message. Every message from the adapter is
redacted first (`redact`: the configured keys and anything shaped like a
credential) and clipped to 1,000 chars (`redact.clean_message`). A dead `reply_to` cancels
the job. The thread is a daemon: nothing here must run at stop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, get_args

import msgspec
import pykka

from cairn.actors.errors import describe_exception
from cairn.actors.provider.base import (
    Finished,
    Provider,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    ReasoningBlockReady,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
    carries_output,
)
from cairn.actors.provider.redact import adapter_secrets, clean_message
from cairn.events.kinds import ErrorClass

_ERROR_CLASSES: frozenset[str] = frozenset(get_args(ErrorClass))
_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(kind)
    for kind in (TextDelta, ReasoningDelta, ToolCallReady, ReasoningBlockReady, UsageReport, Finished)
}


class StreamJob:
    """Run `request` and tell its output to `reply_to`, tagged with `job`."""

    __slots__ = ("cancel", "job", "reply_to", "request")

    def __init__(
        self, job: int, request: ProviderRequest, reply_to: pykka.ActorRef[Any], cancel: threading.Event
    ) -> None:
        self.job = job
        self.request = request
        self.reply_to = reply_to
        self.cancel = cancel


class ProviderItem(msgspec.Struct, frozen=True):
    job: int
    item: ProviderOutput


class ProviderDone(msgspec.Struct, frozen=True):
    job: int
    seconds: float = 0.0


class ProviderFailed(msgspec.Struct, frozen=True, kw_only=True):
    job: int
    error_class: ErrorClass
    message: str
    status_code: int | None = None
    retryable: bool = False
    delivered: bool = False
    seconds: float = 0.0
    #: the server's hint of when to try again (ms), as the adapter's failure carried it
    retry_after_ms: int | None = None


class ProviderActor(pykka.ThreadingActor):
    """Wraps one provider adapter for one session; started and stopped by that session."""

    use_daemon_thread = True

    def __init__(self, adapter: Provider, *, perf: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._adapter = adapter
        self._perf = perf
        self._secrets = adapter_secrets(adapter)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, StreamJob):
            self._run(message)
        return None

    def _run(self, job: StreamJob) -> None:
        perf = self._perf
        delivered = False
        spent = 0.0
        iterator: Iterator[ProviderOutput] | None = None
        try:
            started = perf()
            try:
                iterator = iter(self._adapter.stream(job.request))
            finally:
                spent += perf() - started
            while True:
                started = perf()
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                finally:
                    spent += perf() - started
                if job.cancel.is_set():
                    self._tell(job, _cancelled(job.job, delivered, spent))
                    return
                problem = malformed(item)
                if problem:
                    self._tell(
                        job,
                        ProviderFailed(
                            job=job.job,
                            error_class="server",
                            delivered=delivered,
                            seconds=spent,
                            message=self._clean(f"the provider adapter yielded {problem}"),
                        ),
                    )
                    return
                if not carries_output(item):
                    continue  # an empty delta: nothing to pass on, and no output delivered (R2)
                delivered = True
                if not self._tell(job, ProviderItem(job.job, item)):
                    return
            self._tell(job, ProviderDone(job.job, spent))
        except ProviderFailure as failure:
            self._tell(job, self._from_failure(job.job, failure, delivered, spent))
        except BaseException as exc:  # an adapter bug must still end the job, and only the job
            self._tell(
                job,
                ProviderFailed(
                    job=job.job,
                    error_class="server",
                    message=self._clean(f"the provider adapter raised {describe_exception(exc)}"),
                    delivered=delivered,
                    seconds=spent,
                ),
            )
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # closing must not hide the outcome
                    close()

    def _clean(self, text: str) -> str:
        """An adapter's message as it may be kept: redacted, then clipped."""
        return clean_message(text, self._secrets)

    def _from_failure(
        self, job: int, failure: ProviderFailure, delivered: bool, spent: float
    ) -> ProviderFailed:
        """A `ProviderFailure` of the adapter, its fields checked (it may come from a host's own code)."""
        error_class = failure.error_class if failure.error_class in _ERROR_CLASSES else "server"
        status = failure.status_code
        if not (isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599):
            status = None
        detail = failure.detail if isinstance(failure.detail, str) else describe_exception(failure)
        return ProviderFailed(
            job=job,
            error_class=error_class,
            message=self._clean(detail),
            status_code=status,
            retryable=failure.retryable is True,
            delivered=delivered or failure.output_delivered is True,
            seconds=spent,
            retry_after_ms=_hint(failure),
        )

    @staticmethod
    def _tell(job: StreamJob, message: Any) -> bool:
        try:
            job.reply_to.tell(message)
        except pykka.ActorDeadError:
            job.cancel.set()
            return False
        return True


def _cancelled(job: int, delivered: bool, spent: float) -> ProviderFailed:
    return ProviderFailed(
        job=job, error_class="network", message="cancelled", delivered=delivered, seconds=spent
    )


def malformed(item: object) -> str:
    """What is wrong with an item an adapter yielded, in words; empty when it is a well-formed output."""
    decoder = _decoders.get(type(item))
    if decoder is None:
        return f"a {type(item).__name__}, not a provider output"
    try:
        decoder.decode(_encoder.encode(item))
    except msgspec.ValidationError as exc:
        return f"a malformed {type(item).__name__}: {exc}"
    except UnicodeEncodeError:
        return f"a {type(item).__name__} with text that is not valid Unicode (a lone surrogate)"
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return f"a {type(item).__name__} that cannot be recorded: {type(exc).__name__}"
    if isinstance(item, ToolCallReady) and not (item.call.id and item.call.name):
        return "a ToolCallReady with an empty call id or tool name (its result could not be paired)"
    if isinstance(item, UsageReport) and any(n is not None and n < 0 for n in msgspec.structs.astuple(item)):
        return f"a UsageReport with a negative count: {item}"
    return ""


def _hint(failure: ProviderFailure) -> int | None:
    """The failure's retry hint when it is a non-negative int (an adapter may set anything)."""
    hint = getattr(failure, "retry_after_ms", None)
    if isinstance(hint, bool) or not isinstance(hint, int) or hint < 0:
        return None
    return hint
