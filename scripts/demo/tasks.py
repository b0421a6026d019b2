"""What the demo asks each turn: a review task naming three files, with those files attached (OpenAI).

The scripted agent reads the files itself; a real model gets them attached
(`grown_task`), so the context grows whatever the model says or does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cairn import SessionSettings
from cairn.actors.session.budget import budget_for
from cairn.actors.tokens import TokenCounter
from cairn.demo.workspace import MODULES

TASKS = (
    "Review {a} and {b}: list every function without a docstring.",
    "Find the TODO comments in src/ and propose an order to fix them.",
    "Check that {a} validates its inputs the way {b} does.",
    "Summarise how {a} talks to {b}; note any duplicated logic.",
    "Look for magic numbers in {a} and suggest named constants.",
    "Compare the error handling of {a}, {b} and {c}.",
)
#: the smallest attachment of a turn, in tokens (the demo needs the context to grow)
MIN_ATTACHMENT_TOKENS = 200


def pick_modules(tag: str, count: int) -> list[str]:
    """`count` different workspace modules for the task `tag`, the same on every run (from its hash)."""
    digest = hashlib.sha256(tag.encode()).digest()
    chosen: list[str] = []
    for byte in digest:
        name = MODULES[byte % len(MODULES)]
        if name not in chosen:
            chosen.append(name)
        if len(chosen) == count:
            break
    return chosen


def task_text(sid: str, turn: int) -> str:
    """The task of `turn`, naming its files and ending with its tag (`#demo-1-t3`)."""
    tag = f"{sid}-t{turn}"
    a, b, c = (f"src/{name}.py" for name in pick_modules(tag, 3))
    return TASKS[turn % len(TASKS)].format(a=a, b=b, c=c) + f" #{tag}"


def attachment_tokens(settings: SessionSettings) -> int:
    """About a twelfth of the input budget: a turn alone never jumps the hand-off band (a tenth)."""
    budget = budget_for(settings.context_window, settings.max_output_tokens).input_budget
    assert budget is not None, "checked by openai_setup"
    return max(MIN_ATTACHMENT_TOKENS, budget // 12)


def _test_log(lines: int) -> list[str]:
    rows = []
    for n in range(lines):
        name = MODULES[n % len(MODULES)]
        rows.append(
            f"tests/test_{name}.py::test_{name}_total[case-{n}] PASSED in 0.0{n % 10}s "
            f"(limit={10 * (n % 7 + 1)}, items={n % 13})"
        )
    return rows


def _within(lines: list[str], used: int, tokens: int, counter: TokenCounter) -> tuple[list[str], int]:
    """The leading lines that fit in `tokens` with `used` already spent, and the new total."""
    kept: list[str] = []
    for line in lines:
        cost = counter.text(line + "\n")
        if used + cost > tokens:
            break
        kept.append(line)
        used += cost
    return kept, used


def grown_task(sid: str, turn: int, workspace: Path, *, tokens: int, counter: TokenCounter) -> str:
    """The task of `turn` with about `tokens` tokens of material attached: the three files it names,
    as they are in the workspace now, then a test log. The context grows by it whatever the model
    says or does."""
    tag = f"{sid}-t{turn}"
    text = task_text(sid, turn) + " Attached for reference:"
    used = counter.text(text)
    blocks: list[str] = []
    for path in (f"src/{name}.py" for name in pick_modules(tag, 3)):
        try:
            lines = (workspace / path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue  # the model may have removed it
        kept, used = _within(lines, used, tokens, counter)
        if kept:
            blocks.append(f"\n\n{path}:\n```python\n" + "\n".join(kept) + "\n```")
        if len(kept) < len(lines):
            break
    log, used = _within(_test_log(4_096), used, tokens, counter)
    if log:
        blocks.append("\n\nThe last test run:\n```\n" + "\n".join(log) + "\n```")
    return text + "".join(blocks)
