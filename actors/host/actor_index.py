"""pykka's process-wide actor registry with O(1) registration, so an actor's start and stop cost no scan.

pykka (4.x) keeps every running actor in one list, `ActorRegistry._actor_refs`:
each actor's stop runs `ref in list` and `list.remove(ref)`, two scans of
every actor in the process (a host with 10,000 live sessions has 20,000:
each session and its provider actor). `install` swaps that list for
`OrderedRefs`, an insertion-ordered dict with the same order and the few
list operations pykka uses (`append`, `remove`, `in`, iteration, `[:]`,
`len`), so registering and unregistering are O(1) and every `ActorRegistry`
call answers as before (`get_all` in start order, `stop_all` newest first).

The host installs it when it is created (`Registry`). Nothing is swapped
unless the registry still is a plain list and refs hash by identity (pykka's
`ActorRef` defines no `__eq__`), so another pykka keeps its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, overload

import pykka


class OrderedRefs:
    """The actor refs of a process, in start order: pykka's registry list, O(1) to add to and remove from."""

    __slots__ = ("_refs",)

    def __init__(self, refs: Iterable[Any] = ()) -> None:
        self._refs: dict[Any, None] = dict.fromkeys(refs)

    def append(self, ref: Any) -> None:
        self._refs[ref] = None

    def remove(self, ref: Any) -> None:
        try:
            del self._refs[ref]
        except KeyError:
            raise ValueError("OrderedRefs.remove(ref): ref not registered") from None

    def __contains__(self, ref: object) -> bool:
        return ref in self._refs

    def __iter__(self) -> Iterator[Any]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return list(self._refs)[index]


def install() -> bool:
    """Swap pykka's registry list for `OrderedRefs` (once per process); whether it is in place now."""
    registry = pykka.ActorRegistry
    with registry._actor_refs_lock:
        refs = registry._actor_refs
        if isinstance(refs, OrderedRefs):
            return True
        if type(refs) is not list or pykka.ActorRef.__hash__ is not object.__hash__:
            return False
        registry._actor_refs = OrderedRefs(refs)  # type: ignore[assignment]
        return True
