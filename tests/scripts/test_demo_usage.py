"""Usage a server never sent is unknown, not 0: `cairn demo --provider openai` and `cairn sessions`.

The chat server on 127.0.0.1 plays a model whose stream has no usage chunk
(servers that ignore `stream_options.include_usage` do this). The demo must
still run healthy, and every figure of provider usage it or `cairn sessions`
prints must say unknown.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import cli, demo
from tests.provider.chat_server import ChatServer, Received, Reply, text_reply
from tests.provider.conftest import SECRET_KEY

TURNS = 9
LEDGER = (
    "<analysis>Reviewed the attached modules.</analysis>\n<summary>\n"
    "## Objective and constraints\n- Review the demo shop's modules.\n"
    "## Decisions and rationale\n- Answer from the attached files.\n"
    "## Workspace mutations\n- No evidence observed.\n"
    "## Verification evidence\n- No evidence observed.\n"
    "## Active tasks and background work\n- The latest review task.\n"
    "## Open risks or blockers\n- No evidence observed.\n"
    "## Exact next action\n- Answer the latest task.\n"
    "</summary>"
)


def no_usage(received: Received) -> Reply:
    """A summary for a summary request, a sentence otherwise; never a usage chunk."""
    messages: list[dict[str, Any]] = received.body.get("messages", [])
    if messages and "<summary>" in str(messages[0].get("content")) and "tools" not in received.body:
        return text_reply(LEDGER, usage=None)
    return text_reply("The attached files were reviewed; nothing to add.", usage=None)


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    with ChatServer(responder=no_usage) as server:
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CAIRN_MAX_OUTPUT_TOKENS", "CAIRN_TIMEOUT_S"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CAIRN_BASE_URL", server.url)
        monkeypatch.setenv("CAIRN_API_KEY", SECRET_KEY)
        monkeypatch.setenv("CAIRN_MODEL", "no-usage-model")
        monkeypatch.setenv("CAIRN_CONTEXT_WINDOW", "16000")
        monkeypatch.setenv("CAIRN_STRUCTURED_SUMMARY", "off")  # the server writes the text ledger
        yield server
    for thread in threading.enumerate():  # the demo's actor threads, joined before the next test
        if "Actor-" in thread.name:
            thread.join(30)


def test_the_demo_shows_usage_a_server_never_sent_as_unknown(
    tmp_path: Path, endpoint: ChatServer, capsys: pytest.CaptureFixture[str]
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
            "1",
            "--turns",
            str(TURNS),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report  # healthy: no usage is no fault of the run
    session = report["reports"][0]
    assert session["tokens"] is None and session["responses_without_usage"] == session["responses"] > 0
    assert report["observed"]["provider tokens"] is None

    demo.render(report)
    shown = capsys.readouterr().out
    assert "provider tokens unknown" in shown and "provider tokens 0" not in shown
    row = next(line for line in shown.splitlines() if "demo-1" in line and "completed" in line)
    assert "unknown" in row

    assert cli.main(["sessions", "--store", str(store), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)[0]
    assert listed["prompt_tokens"] is None and listed["completion_tokens"] is None
    assert listed["usage_complete"] is False and listed["last_usage_total_tokens"] is None
    assert cli.main(["sessions", "--store", str(store)]) == 0
    assert capsys.readouterr().out.splitlines()[1].count("unknown") == 2
