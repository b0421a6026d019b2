"""Who a session lets in: the workspace rule and idempotency keys, for each message it takes.

A layer of the session actor (`core` explains the chain), between its
compaction and its turn loop. A new session takes the workspace of its
first message that names one; every later message must name the same one,
or none. A message whose idempotency key the session has seen
(`idempotency`) records nothing: it joins the turn that took the key, is
answered from the log, or, carrying other content, is refused.
"""

from __future__ import annotations

from cairn.actors.errors import UnknownSession, WorkspaceMismatch
from cairn.actors.session.compacting import Compacting
from cairn.actors.session.idempotency import KeyedMessage, key_index, same_message, turn_outcome
from cairn.actors.session.messages import Send
from cairn.actors.session.stream import Turn
from cairn.events.model import parts_of


class Admitting(Compacting):
    """The session actor's admission of messages (see the module doc)."""

    def _queue_send(self, message: Send) -> None:
        """A message that arrived while the session waits: recorded before the next request, or after."""
        key = message.key
        if key is not None and all(send.key != key for send in self._sends) and self._by_key(message, {}, []):
            return  # a resend: joined the running turn, or answered from the log, at once
        self._sends.append(message)

    def _accept(self, sends: list[Send]) -> tuple[list[Send], list[Turn]]:
        """The sends this session records, and the handles of resends that join them.

        A new session takes the workspace of its first message that names one;
        every later message must name the same one, or none. A send whose
        idempotency key is known is answered here (`_by_key`): it joins its
        turn (returned when that is one of these sends) or gets its outcome.
        """
        info = self._state.info
        workspace = info.workspace if info is not None else None
        accepted: list[Send] = []
        joining: list[Turn] = []
        batch: dict[str, Send] = {}
        for send in sends:
            problem = ""
            if workspace is None and send.workspace is None:
                problem = f"session {self._sid} is new: its first message needs a workspace"
            elif workspace is not None and send.workspace not in (None, workspace):
                problem = f"session {self._sid} works in {workspace}, not {send.workspace}"
            if problem:
                kind = UnknownSession if workspace is None else WorkspaceMismatch
                send.handle._finish(self._result("rejected", "", error_class=kind.__name__, error=problem))
                continue
            if send.key is not None:
                if self._by_key(send, batch, joining):
                    continue
                batch[send.key] = send
            if workspace is None:
                workspace = send.workspace
            accepted.append(send)
        return accepted, joining

    def _by_key(self, send: Send, batch: dict[str, Send], joining: list[Turn]) -> bool:
        """Whether `send`'s key was seen: then it joins, is answered from the log, or is refused."""
        key = send.key
        assert key is not None
        earlier = batch.get(key)
        hit = self._key_index().get(key)
        seen = earlier.text if earlier is not None else hit.content if hit is not None else None
        if seen is None:
            return False
        if not same_message(seen, send.text):
            problem = f"idempotency key {key!r} was used for another message of session {self._sid}"
            send.handle._finish(
                self._result("rejected", "", error_class="IdempotencyKeyReused", error=problem)
            )
            return True
        run = self._run
        if earlier is not None:
            joining.append(send.handle)  # its first send is recorded with this batch
        elif hit is not None and run is not None and hit.turn_id == run.turn_id:
            send.handle._join(run.handles[0])
            run.handles.append(send.handle)
        elif hit is not None:
            records, result = turn_outcome(list(self._journal.read(self._sid)), self._sid, hit.turn_id)
            for record in records:
                send.handle._publish(record)
            send.handle._finish(result)
        return True

    def _key_index(self) -> dict[str, KeyedMessage]:
        """The keys in this session's log and their turns, read once (then kept up to date)."""
        if self._keys is None:
            self._keys = key_index(self._journal.read(self._sid))
        return self._keys

    def _remember(self, sends: list[Send], turn_id: str) -> None:
        """The keys of `sends`, now recorded in turn `turn_id`."""
        if self._keys is None:
            return  # read from the log when first needed, these included
        for send in sends:
            if send.key is not None:
                self._keys.setdefault(send.key, KeyedMessage(turn_id, parts_of(send.text)))

    def _withdraw(self, handle: Turn) -> bool:
        """Take a message that waits behind the running turn out of the queue; whether it was there."""
        for send in self._sends:
            if send.handle is handle:
                self._sends.remove(send)
                handle._finish(self._result("cancelled", "", error="withdrawn before it was recorded"))
                return True
        return False
