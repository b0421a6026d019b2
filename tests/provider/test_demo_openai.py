"""`cairn demo --provider openai` against the chat-completions server on 127.0.0.1.

The server plays a terse model: the first request of a task calls `grep`, the next answers in one
sentence, and a summary request (known by its prompt) gets a ledger. It reports usage as a real
server would (its own count, here a quarter of the characters), so the sessions run on provider
floors. The demo's own messages must make every session cross the hand-off band and compact at a
window of 16,000 tokens, and every session must replay identically.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import SessionSettings, cli, demo
from cairn.actors.session.budget import budget_for
from cairn.actors.tokens import TokenCounter
from cairn.demo.tasks import attachment_tokens, grown_task
from cairn.demo.workspace import make_workspace
from cairn.store import verify_store
from tests.provider.chat_server import ChatServer, Received, Reply, Sse, call_start, chunk, usage_chunk
from tests.provider.conftest import SECRET_KEY

TURNS = 9
LEDGER = (
    "<analysis>The agent reviewed attached modules one task at a time.</analysis>\n<summary>\n"
    "## Objective and constraints\n- Review the demo shop's modules, one task per message.\n"
    "## Decisions and rationale\n- Answer from the attached files; grep for TODOs.\n"
    "## Workspace mutations\n- No evidence observed.\n"
    "## Verification evidence\n- grep listed the open TODOs in src/.\n"
    "## Active tasks and background work\n- The latest review task.\n"
    "## Open risks or blockers\n- No evidence observed.\n"
    "## Exact next action\n- Answer the latest task.\n"
    "</summary>"
)
#: the same ledger as a JSON object, for a summary request that asks for one (`response_format`)
LEDGER_JSON = json.dumps(
    {
        "objective_and_constraints": ["Review the demo shop's modules, one task per message."],
        "decisions_and_rationale": ["Answer from the attached files; grep for TODOs."],
        "workspace_mutations": [],
        "verification_evidence": ["grep listed the open TODOs in src/."],
        "active_tasks_and_background_work": ["The latest review task."],
        "open_risks_or_blockers": [],
        "exact_next_action": ["Answer the latest task."],
    }
)
_TAG = re.compile(r"#(demo-\d+-t\d+)")


class TerseModel:
    """Answers each request of the demo by what it contains (thread-safe: sessions run at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self.summaries = 0
        self.turns = 0

    def __call__(self, received: Received) -> Reply:
        body = received.body
        messages: list[dict[str, Any]] = body.get("messages", [])
        prompt = len(json.dumps(messages)) + len(json.dumps(body.get("tools", [])))
        if "response_format" in body:  # the JSON ledger (the default, `auto`)
            assert body["response_format"]["json_schema"]["name"] == "ledger" and "tools" not in body
            with self._lock:
                self.summaries += 1
            return self._text(LEDGER_JSON, prompt)
        if messages and "<summary>" in str(messages[0].get("content")) and "tools" not in body:
            with self._lock:
                self.summaries += 1
            return self._text(LEDGER, prompt)
        with self._lock:
            self.turns += 1
        task = max(
            (n for n, m in enumerate(messages) if m["role"] == "user" and _TAG.search(str(m.get("content")))),
            default=-1,
        )
        match = _TAG.search(str(messages[task].get("content"))) if task >= 0 else None
        tag = match.group(1) if match else "no task"
        if not any(m["role"] == "tool" for m in messages[task + 1 :]):
            # the same id whichever session asks first; a second call for one task (after a
            # compaction dropped the first) gets its own
            with self._lock:
                self._calls[tag] = self._calls.get(tag, 0) + 1
                call_id = f"call-{tag}-{self._calls[tag]}"
            arguments = json.dumps({"pattern": "TODO", "path": "src"})
            return Sse(
                (
                    chunk(role="assistant", content="Checking the open TODOs first. "),
                    chunk(tool_calls=[call_start(0, call_id, "grep", arguments)]),
                    chunk(finish="tool_calls"),
                    usage_chunk(prompt // 4, 12, prompt // 4 + 12),
                )
            )
        return self._text(f"Done with {tag}: the attached files were reviewed and the TODOs listed.", prompt)

    @staticmethod
    def _text(text: str, prompt: int) -> Sse:
        completion = len(text) // 4
        return Sse(
            (
                chunk(role="assistant", content=text[: len(text) // 2]),
                chunk(content=text[len(text) // 2 :]),
                chunk(finish="stop"),
                usage_chunk(prompt // 4, completion, prompt // 4 + completion),
            )
        )


@pytest.fixture
def model() -> TerseModel:
    return TerseModel()


@pytest.fixture
def endpoint(model: TerseModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    """The server, and the CAIRN_* variables pointing the demo at it."""
    with ChatServer(responder=model) as server:
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CAIRN_MAX_OUTPUT_TOKENS", "CAIRN_TIMEOUT_S"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CAIRN_BASE_URL", server.url)
        monkeypatch.setenv("CAIRN_API_KEY", SECRET_KEY)
        monkeypatch.setenv("CAIRN_MODEL", "loopback-model")
        monkeypatch.setenv("CAIRN_CONTEXT_WINDOW", "16000")
        yield server


@pytest.fixture(autouse=True)
def join_actor_threads() -> Iterator[None]:
    """The demo closes its hosts; their actor threads are joined before the conftest looks."""
    before = set(threading.enumerate())
    yield
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(30)


def test_demo_on_an_openai_endpoint_crosses_the_handoff_band_compacts_and_replays(
    tmp_path: Path, endpoint: ChatServer, model: TerseModel, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"

    code = cli.main(
        [
            "demo",
            "--provider",
            "openai",
            "--store",
            str(store),
            "--sessions",
            "2",
            "--turns",
            str(TURNS),
            "--json",
        ]
    )

    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert (report["provider"], report["model"]) == ("openai", "loopback-model")
    assert report["context_window"] == 16000
    assert report["replayed_identically"] == 2 and all(report["seen"].values())
    for session in report["reports"]:
        assert session["turns"] == TURNS and session["failures"] == []
        assert session["handoffs"] >= 1  # the band itself was entered, not only jumped over
        assert any(c["trigger"] == "threshold" and c["strategy"] == "llm" for c in session["checkpoints"])
    assert model.summaries >= 2 and report["observed"]["LLM checkpoints"] == model.summaries
    assert all(r.body["model"] == "loopback-model" for r in endpoint.requests)
    assert all(r.headers["authorization"] == f"Bearer {SECRET_KEY}" for r in endpoint.requests)
    assert verify_store(store).ok
    for path in store.rglob("*"):
        assert not path.is_file() or SECRET_KEY.encode() not in path.read_bytes()


def test_the_openai_demo_sizes_its_turns_by_the_window_whatever_the_model_says(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    make_workspace(workspace, 1)
    counter = TokenCounter()
    for window, cap in ((16_000, None), (16_000, 2_000), (128_000, None)):
        settings = SessionSettings(model="m", context_window=window, max_output_tokens=cap)
        tokens = attachment_tokens(settings)
        budget = budget_for(window, cap).input_budget
        assert budget is not None and tokens == budget // 12  # under the band's width, a tenth
        text = grown_task("demo-1", 3, workspace, tokens=tokens, counter=counter)
        assert "#demo-1-t3" in text and "```python" in text
        assert tokens * 9 // 10 <= counter.text(text) <= tokens + 40


@pytest.mark.parametrize(
    ("unset", "words"),
    [("CAIRN_MODEL", "CAIRN_MODEL"), ("CAIRN_CONTEXT_WINDOW", "CAIRN_CONTEXT_WINDOW: the demo must know")],
)
def test_the_openai_demo_without_its_settings_says_which_and_exits_2(
    tmp_path: Path,
    endpoint: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    unset: str,
    words: str,
) -> None:
    monkeypatch.delenv(unset)
    code = demo.main(["--provider", "openai", "--store", str(tmp_path / "store"), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and SECRET_KEY not in err
    assert endpoint.requests == [] and not (tmp_path / "store").exists()


def test_the_openai_demo_refuses_a_window_with_no_input_budget(
    tmp_path: Path, endpoint: ChatServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAIRN_CONTEXT_WINDOW", "8000")  # B1: the reserve is at least 8,192
    code = demo.main(["--provider", "openai", "--store", str(tmp_path / "store")])
    assert code == 2 and "CAIRN_MAX_OUTPUT_TOKENS" in capsys.readouterr().err


def test_the_openai_demo_does_not_continue_sessions_of_another_model(
    tmp_path: Path, endpoint: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    demo.main(["--store", str(store), "--sessions", "1", "--turns", "1", "--json"])  # scripted
    capsys.readouterr()
    code = demo.main(["--provider", "openai", "--store", str(store), "--sessions", "1", "--json"])
    assert code == 2 and "use another --store" in capsys.readouterr().err
    assert endpoint.requests == []  # the log's model would have been sent to the endpoint
