"""A session's history as the model sees it, kept in step with its state at O(new messages) a sync.

`HistoryView` is a memo of four pure functions of `SessionState.context`:
the rendering of every message (tool_budget.render_context; one walk does
the rendering, the counts and the turns, the open tool turn's results
sharing its X2 budget as `TurnBudgets` has them share it), the token count
of each rendering (T1, with prefix sums so any range costs O(1)), the tool
turns (M3, events.model.tool_turns) with how often each call id occurs, and
each turn's S2 class for the session's read-only tools (`rank_of` in
slimming: kept as the turn grows, so a snip plan ranks nothing anew, even
the first one after a respawn).

Sync rule: the context changes only by appends, except at a slimming (the
revision increases, P5) or a checkpoint (a new checkpoint seq). So while
(sid, epoch, checkpoint seq, revision, read-only tools) stay the same and
the messages already seen are still in place, a sync only walks the new
messages; anything else
rebuilds the memo from scratch, which gives the same result. Tests check the
memo against the pure functions.

Stored counts (`actors.session.counts`): a message whose event recorded its
count under this counter's scheme, and which the model sees as it is, takes
that count instead of being encoded again, and the counter remembers it for
that message object; so a view rebuilt after a respawn encodes nothing the
log already counted.

Not thread-safe: a view belongs to one session (its actor), like its counter.
"""

from __future__ import annotations

from collections import Counter

from cairn.actors.session.tool_budget import RESULT_LIMIT, TURN_LIMIT, render_other, render_result
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import ShownCount, TokenCount
from cairn.events.model import Message, TextPart, ToolTurn
from cairn.events.state import SessionInfo, SessionState

#: S2: tools read-only by default, when the host declares none
DEFAULT_READ_ONLY_TOOLS = ("read", "grep", "glob", "search", "web-search", "web-fetch", "list")

RANK_READ_ONLY = 0
RANK_WRITE = 1
RANK_ERROR = 2


def read_only_tools(info: SessionInfo | None) -> frozenset[str]:
    """S2: the tools the host declares read-only, or the default names."""
    names = info.read_only_tools if info is not None else None
    return frozenset(DEFAULT_READ_ONLY_TOOLS if names is None else names)


class TurnEntry:
    """One tool turn (M3): the call's index, its call ids and the indexes of its results.

    `rank` is the S2 class of the turn for the read-only tool names
    `rank_for` (the view sets it for its session's names and raises it as
    results come in, which for any names only raises it: an error result to
    2, a write to at least 1; `slimming.rank_of` computes it for other names).
    """

    __slots__ = ("call_ids", "call_index", "id_set", "rank", "rank_for", "result_indexes")

    def __init__(
        self,
        call_index: int,
        call_ids: tuple[str, ...],
        rank: int | None = None,
        rank_for: frozenset[str] | None = None,
    ) -> None:
        self.call_index = call_index
        self.call_ids = call_ids
        self.id_set = frozenset(call_ids)
        self.result_indexes: list[int] = []
        self.rank = rank
        self.rank_for = rank_for

    @property
    def indexes(self) -> tuple[int, ...]:
        return (self.call_index, *self.result_indexes)

    def as_tool_turn(self) -> ToolTurn:
        return ToolTurn(self.call_index, tuple(self.result_indexes), self.call_ids)


_Key = tuple[str, int, int, int]


class HistoryView:
    """The rendered history of one session with per-message token counts and tool turns."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._key: _Key | None = None
        self._context: tuple[Message, ...] = ()
        self._info: SessionInfo | None = None
        self._read_only = read_only_tools(None)
        self._reset()

    def _reset(self) -> None:
        self._context = ()
        self._rendered: list[Message] = []
        self._prefix: list[int] = [0]
        #: X2: chars of output the open tool turn's results have shown so far
        self._used = 0
        self._turns: list[TurnEntry] = []
        self._open: TurnEntry | None = None
        self._refs: Counter[str] = Counter()  # filled with dict calls (Counter.update is slow)

    def sync(self, state: SessionState) -> None:
        """Bring the view up to `state.context`: O(new messages) while history only grew."""
        key = (state.sid, state.epoch, state.checkpoint_seq, state.revision)
        context = state.context
        seen = len(self._context)
        info = state.info
        renamed = False
        if info is not self._info:
            self._info = info
            read_only = read_only_tools(info)
            renamed = read_only != self._read_only
            self._read_only = read_only
        if seen and (
            renamed
            or key != self._key
            or len(context) < seen
            or not _same(context[seen - 1], self._context[seen - 1])
            or not _same(context[0], self._context[0])
        ):
            self._reset()
            seen = 0
        self._key = key
        if len(context) == seen:
            self._context = context
            return
        counts = state.context_counts
        if len(counts) != len(context):  # a state built by hand: no stored counts
            counts = (None,) * len(context)
        self._append(context, counts, seen)
        self._context = context

    def _append(
        self, context: tuple[Message, ...], counts: tuple[TokenCount | ShownCount | None, ...], start: int
    ) -> None:
        """Walk `context[start:]` into the memo (one loop, locals only: a rebuild walks every message)."""
        # long: the respawn walks every message of the session here; a call per step costs
        counter = self.counter
        scheme = counter.scheme
        count = counter.message
        rendered_list = self._rendered
        prefix = self._prefix
        total = prefix[-1]
        refs = self._refs
        turns = self._turns
        open_turn = self._open
        used = self._used
        read_only = self._read_only
        trusted: list[Message] = []
        trusted_counts: list[int] = []
        for index in range(start, len(context)):
            message = context[index]
            role = message.role
            content = message.content
            # the rendering (X1-X3), as tool_budget.TurnBudgets walks it: the open tool turn (M3)
            # is this walk's `open_turn`, and its results share `used` of TURN_LIMIT chars
            if role == "tool":
                call_id = message.tool_call_id or ""
                opened = open_turn is not None and message.tool_call_id in open_turn.call_ids
                rendered = None
                if type(content) is tuple:  # text parts only, shown whole: the message itself
                    size = 0
                    for part in content:
                        if type(part) is not TextPart:
                            break
                        size += len(part.text)
                    else:
                        if size <= RESULT_LIMIT and (size <= TURN_LIMIT - used if opened else True):
                            if opened:
                                used += size
                            rendered = message
                if rendered is None:
                    if opened:
                        rendered, shown = render_result(message, max(0, TURN_LIMIT - used))
                        used += shown
                    else:
                        rendered = render_result(message, TURN_LIMIT)[0]
            else:
                if role != "system":
                    used = 0
                rendered = message if type(content) is str else render_other(message)
            rendered_list.append(rendered)
            stored = counts[index]
            if (
                stored is not None
                and rendered is message
                and type(stored) is TokenCount
                and stored.counter == scheme
            ):
                tokens = stored.count
                trusted.append(message)
                trusted_counts.append(tokens)
            else:
                if type(stored) is ShownCount and stored.counter == scheme:  # good for that rendering only
                    counter.remember_digest(message.id, bytes.fromhex(stored.digest), stored.count)
                tokens = count(rendered)
            total += tokens
            prefix.append(total)
            if role == "tool":
                refs[call_id] = refs.get(call_id, 0) + 1
                if open_turn is not None and call_id in open_turn.call_ids:
                    open_turn.result_indexes.append(index)
                    meta = message.meta  # S2, as results raise a turn's class
                    if meta.tool_status == "error":
                        open_turn.rank = RANK_ERROR
                    elif meta.tool_effect == "write" and open_turn.rank == RANK_READ_ONLY:
                        open_turn.rank = RANK_WRITE
            elif role == "assistant" and message.tool_calls:
                calls = message.tool_calls
                rank = RANK_READ_ONLY
                for call in calls:
                    if call.name not in read_only:
                        rank = RANK_WRITE
                        break
                open_turn = TurnEntry(index, tuple([call.id for call in calls]), rank, read_only)
                for call_id in open_turn.call_ids:
                    refs[call_id] = refs.get(call_id, 0) + 1
                turns.append(open_turn)
            elif role != "system":
                open_turn = None
        self._open = open_turn
        self._used = used
        if trusted:
            counter.remember_all(trusted, trusted_counts)

    # --- reading ---------------------------------------------------------

    @property
    def context(self) -> tuple[Message, ...]:
        """The state's context as of the last sync (what the model is sent, before rendering)."""
        return self._context

    @property
    def rendered(self) -> list[Message]:
        """The model-visible form of each context message (read-only)."""
        return self._rendered

    @property
    def total(self) -> int:
        """Tokens of the whole rendered history."""
        return self._prefix[-1]

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """Tokens of rendered messages [start, end), in O(1)."""
        stop = len(self._rendered) if end is None else end
        return self._prefix[stop] - self._prefix[start]

    def message_tokens(self, index: int) -> int:
        return self._prefix[index + 1] - self._prefix[index]

    @property
    def read_only(self) -> frozenset[str]:
        """S2: the read-only tool names of the session last synced (what the turns' ranks are for)."""
        return self._read_only

    @property
    def turns(self) -> list[TurnEntry]:
        """Tool turns oldest first (read-only)."""
        return self._turns

    def references(self, call_id: str) -> int:
        """How many context messages name `call_id` (as a call or as a result)."""
        return self._refs[call_id]


def _same(a: Message, b: Message) -> bool:
    return a is b or a == b
