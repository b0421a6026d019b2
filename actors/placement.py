"""CPU placement: leave a host's threads to the OS (the default), or put them on one CPU, or batch them.

cairn is GIL-bound Python: its session, provider and compactor actors, the
journal's writer and the host's own threads never run Python in parallel.
Spreading them over CPUs adds cross-CPU wake-ups (an acknowledgement, an
actor message or a GIL hand-over between threads on different CPUs), and on
one CPU the kernel lets each woken thread preempt the one that woke it,
which `SCHED_BATCH` turns off. So on a quiet machine one CPU,
batch-scheduled, can be faster for many sessions at once.

It is not what a loaded machine rewards. Measured on a shared 2-vCPU
machine (each placement in its own process, at 1 to 1,024 sessions, alone
and beside a CPU-bound process; the bench suite that did it was retired with
issue 24): one CPU fell to 0.03-0.34x of the OS placement for a lone
session beside a busy process on its CPU, and to 0.06-0.09x with 1,024
sessions taking turns on a busy machine, though it made up to 4x the OS
placement's turns on a half-idle one; batch scheduling fell to 0.11-0.25x
for one session beside a busy process (a batch-scheduled thread never
preempts the busy one). No placement wins everywhere; the OS placement is
the one that never collapses, so it is the default: nothing is placed
unless asked. `CAIRN_CPU=auto` (one CPU,
chosen by pid), `N` or `batch` ask for the others (`place_from_env`, which
`cairn demo` calls); `pin_process` and `batch_process` are the calls.

Threads inherit the affinity and policy of the thread that starts them, so
placing the process once at start-up covers every thread started later.
Child processes inherit them too: a host whose tools run CPU-heavy
subprocesses (compilers, test runners) starts them inside `with unpinned():`,
which gives the child what the process had before. This module never
changes the process on import, and `Host.open` does not call it.

Linux only (`os.sched_setaffinity`, `SCHED_BATCH`); elsewhere every function
does nothing and says so (None, or `Placed("os")`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Final, Literal

from cairn.events.errors import InputError

#: `CAIRN_CPU` values: a CPU number, `auto` (pick one), `batch` (batch scheduling on
#: every CPU the process has), or `off` (leave the process to the OS)
ENV_VAR = "CAIRN_CPU"
BATCH: Final = "batch"
#: what an unset `CAIRN_CPU` means: the OS placement, the one that never collapsed (see the module doc)
DEFAULT: Final = "off"


class PlacementError(InputError):
    """A CPU setting that names no CPU this process may use (an `InputError`, so still a `ValueError`)."""


@dataclass(frozen=True)
class Placement:
    """Where a thread runs: the CPUs it may use and its scheduling policy."""

    cpus: frozenset[int]
    policy: int
    #: the static priority that goes with `policy` (0 but for the real-time policies)
    priority: int = 0


#: how the process ran before it was first placed (`pin_process`, `batch_process`), for `unpinned`
_before: Placement | None = None


def supported() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(os, "SCHED_BATCH")


def choose_cpu(allowed: Set[int], pid: int) -> int:
    """The CPU a process should use out of `allowed`: spread by pid, so hosts on one machine differ.

    Pure: the same set and pid always give the same CPU.
    """
    if not allowed:
        raise PlacementError("no CPU is allowed for this process")
    ordered = sorted(allowed)
    return ordered[pid % len(ordered)]


def parse_setting(value: str | None, allowed: Set[int], pid: int) -> int | Literal["batch"] | None:
    """What a `CAIRN_CPU` setting asks for: a CPU, `BATCH`, or None (leave placement to the OS).

    Unset or empty is `DEFAULT` (`off`); `off` (also `none`, `no`, `false`)
    means no placement; `auto` picks one CPU with `choose_cpu`; `batch`
    keeps every CPU and only batch-schedules; a number must be one of
    `allowed`.
    """
    text = (value or DEFAULT).strip().lower()
    if text in ("off", "none", "no", "false"):
        return None
    if text == "auto":
        return choose_cpu(allowed, pid)
    if text == BATCH:
        return BATCH
    try:
        cpu = int(text)
    except ValueError:
        raise PlacementError(f"{ENV_VAR}={value!r}: use a CPU number, 'auto', 'batch' or 'off'") from None
    if cpu not in allowed:
        raise PlacementError(
            f"{ENV_VAR}={value!r}: CPU {cpu} is not one this process may use (allowed: {sorted(allowed)})"
        )
    return cpu


def current(tid: int = 0) -> Placement | None:
    """The placement of thread `tid` (0: the calling thread); None where unsupported."""
    if not supported():
        return None
    return Placement(
        frozenset(os.sched_getaffinity(tid)),
        os.sched_getscheduler(tid),
        os.sched_getparam(tid).sched_priority,
    )


def _apply(tid: int, cpus: Set[int], policy: int, priority: int = 0) -> None:
    # the policy first: it is the call that can be refused (a real-time policy without the right),
    # and then the thread's CPUs are still as they were
    os.sched_setscheduler(tid, policy, os.sched_param(priority))
    os.sched_setaffinity(tid, set(cpus))


def _thread_ids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # no procfs: the calling thread alone


def _target(cpu: int | None, allowed: frozenset[int]) -> int:
    target = cpu if cpu is not None else choose_cpu(allowed, os.getpid())
    if target not in allowed:
        raise PlacementError(f"CPU {target} is not one this process may use (allowed: {sorted(allowed)})")
    return target


def pin_process(cpu: int | None = None) -> Placement | None:
    """Run every thread of this process on one CPU (`cpu`, or one chosen), batch-scheduled.

    Threads started later inherit it. Returns how the calling thread ran
    before, for `restore_process`; None where unsupported. Raises
    PlacementError for a CPU the process may not use.
    """
    before = current()
    if before is None:
        return None
    return _place_process(before, frozenset({_target(cpu, before.cpus)}))


def batch_process() -> Placement | None:
    """Batch-schedule every thread of this process on the CPUs it has; later threads inherit it.

    Returns how the calling thread ran before, for `restore_process`; None
    where unsupported.
    """
    before = current()
    if before is None:
        return None
    return _place_process(before, before.cpus)


def _place_process(before: Placement, cpus: frozenset[int]) -> Placement:
    global _before
    _each_thread(lambda tid: _apply(tid, cpus, os.SCHED_BATCH))
    if _before is None:
        _before = before
    return before


def _each_thread(apply: Callable[[int], None]) -> None:
    """`apply` to every thread of the process, again for threads started meanwhile (by one not yet done)."""
    done: set[int] = set()
    while True:
        fresh = [tid for tid in _thread_ids() if tid not in done]
        if not fresh:
            return
        for tid in fresh:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                apply(tid)
            done.add(tid)


def restore_process(before: Placement | None) -> None:
    """Give every thread of this process the placement `pin_process` returned."""
    global _before
    if before is None or not supported():
        return
    _each_thread(lambda tid: _apply(tid, before.cpus, before.policy, before.priority))
    _before = None


@dataclass(frozen=True)
class Placed:
    """What `place_from_env` did: `one-cpu` (on `cpu`), `batch`, or `os` (nothing)."""

    mode: Literal["one-cpu", "batch", "os"]
    cpu: int | None = None


def place_from_env(environ: Mapping[str, str] | None = None) -> Placed:
    """Place the process as `CAIRN_CPU` says (unset: `DEFAULT`, the OS's placement); say what was done.

    Raises PlacementError for a setting that names no CPU of this process.
    """
    before = current()
    if before is None:
        return Placed("os")
    env = os.environ if environ is None else environ
    choice = parse_setting(env.get(ENV_VAR), before.cpus, os.getpid())
    if choice is None:
        return Placed("os")
    if choice == BATCH:
        batch_process()
        return Placed("batch")
    pin_process(choice)
    return Placed("one-cpu", choice)


@contextlib.contextmanager
def on_one_cpu(cpu: int | None = None) -> Iterator[int | None]:
    """Run the calling thread, and every thread it starts meanwhile, as `pin_process` would.

    Threads started inside keep that placement after the block (the kernel
    copies it when a thread is created); the calling thread gets its own
    back. Yields the CPU, or None where unsupported.
    """
    before = current()
    if before is None:
        yield None
        return
    target = _target(cpu, before.cpus)
    with _placed(before, frozenset({target})):
        yield target


@contextlib.contextmanager
def batch_scheduled() -> Iterator[None]:
    """Run the calling thread, and every thread it starts meanwhile, as `batch_process` would."""
    before = current()
    if before is None:
        yield
        return
    with _placed(before, before.cpus):
        yield


@contextlib.contextmanager
def _placed(before: Placement, cpus: frozenset[int]) -> Iterator[None]:
    _apply(0, cpus, os.SCHED_BATCH)
    try:
        yield
    finally:
        _apply(0, before.cpus, before.policy, before.priority)


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """Give the calling thread the placement the process had before `pin_process`, for the block.

    For starting child processes that should use every CPU (a child
    inherits the placement of the thread that starts it). Does nothing when
    the process was not placed.
    """
    wide = _before
    narrow = current() if wide is not None else None
    if wide is None or narrow is None:
        yield
        return
    _apply(0, wide.cpus, wide.policy, wide.priority)
    try:
        yield
    finally:
        _apply(0, narrow.cpus, narrow.policy, narrow.priority)
