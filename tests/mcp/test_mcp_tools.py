"""`McpTools` against MCP servers nobody here wrote (issue 26 points 1 and 4): the reference filesystem
server over stdio and the reference "everything" server over streamable HTTP, both from the npm
registry (pinned in `node/package.json`), run with Node.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from cairn import Host, HostConfig, Reply, ScriptedProvider
from cairn.actors.mcp_tools import McpServer, McpTools, outcome_of, tool_name
from cairn.actors.tools import ToolInvocation
from cairn.events.errors import InputError
from cairn.events.kinds import SessionStarted, ToolResult
from cairn.events.model import ImagePart, TextPart, ToolCall
from tests.npm import npm_install

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None, reason="Node and npm are not installed"
)
WAIT_S = 60.0
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The servers' packages, installed from the npm registry into a folder of their own."""
    folder = npm_install(HERE / "node", tmp_path_factory.mktemp("mcp-node"))
    return folder / "node_modules" / "@modelcontextprotocol"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("the build needs Python 3.11\n")
    return folder


@pytest.fixture
def fs(servers: Path, workspace: Path) -> Iterator[McpTools]:
    script = servers / "server-filesystem" / "dist" / "index.js"
    server = McpServer(
        name="fs", command="node", args=(str(script), str(workspace)), env={"FS_TOKEN": "s3cret"}
    )
    with McpTools([server]) as tools:
        yield tools


def _call(tools: McpTools, name: str, arguments: dict[str, object], workspace: Path) -> object:
    call = ToolCall("c1", name, json.dumps(arguments))
    return tools(ToolInvocation(session="s", workspace=str(workspace), turn_id="t1", call=call))


def test_the_filesystem_servers_tools_are_named_by_server_and_their_effect_comes_from_annotations(
    fs: McpTools, workspace: Path
) -> None:
    names = [json.loads(schema)["function"]["name"] for schema in fs.schemas]
    assert "fs__read_text_file" in names and "fs__write_file" in names
    assert all(name.startswith("fs__") for name in names)
    read_text = next(
        json.loads(s) for s in fs.schemas if json.loads(s)["function"]["name"] == "fs__read_text_file"
    )
    assert read_text["function"]["parameters"]["properties"]["path"]["type"] == "string"
    assert "fs__read_text_file" in fs.read_only and "fs__write_file" not in fs.read_only

    read = _call(fs, "fs__read_text_file", {"path": str(workspace / "notes.txt")}, workspace)
    assert read.content == "the build needs Python 3.11\n" and read.status == "ok" and read.effect == "read"
    outside = _call(fs, "fs__read_text_file", {"path": "/etc/hostname"}, workspace)
    assert outside.status == "error" and "outside allowed directories" in str(outside.content)
    wrote = _call(fs, "fs__write_file", {"path": str(workspace / "new.txt"), "content": "made"}, workspace)
    assert wrote.status == "ok" and wrote.effect == "write"
    assert (workspace / "new.txt").read_text() == "made"
    unknown = _call(fs, "fs__nothing", {}, workspace)
    assert unknown.status == "error" and "no MCP tool" in str(unknown.content)


def test_a_session_with_mcp_tools_runs_them_and_records_their_results(
    fs: McpTools, tmp_path: Path, workspace: Path
) -> None:
    """Through a real host: the session begins with the servers' schemas and read-only names, and the
    model's call of one is recorded as its tool result."""
    call = ToolCall("c-read", "fs__read_text_file", json.dumps({"path": str(workspace / "notes.txt")}))
    provider = ScriptedProvider(
        turns=(Reply(text="Reading.", tool_calls=(call,)), Reply(text="Python 3.11."))
    )
    with Host.open(tmp_path / "store", provider=provider, tools=fs, config=HostConfig(sweep=False)) as host:
        result = host.send("s1", "Which Python?", workspace=workspace).result(WAIT_S)
        assert result.ok, result
        records = list(host.journal.read("s1"))
    started = next(r.event for r in records if isinstance(r.event, SessionStarted))
    assert set(fs.schemas) <= set(started.tool_schemas)
    assert "fs__read_text_file" in (started.read_only_tools or ())
    found = [r.event for r in records if isinstance(r.event, ToolResult)]
    assert [(t.tool_name, t.status, t.effect) for t in found] == [("fs__read_text_file", "ok", "read")]
    assert (found[0].server, found[0].server_tool) == ("fs", "read_text_file")  # for audit (point 3)
    assert "Python 3.11" in str(found[0].content)
    log = "\n".join(str(r.event) for r in records)
    assert "s3cret" not in log  # the server's environment never reaches the log


@pytest.fixture
def everything(servers: Path) -> Iterator[str]:
    """The reference "everything" server on streamable HTTP, on a free port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = servers / "server-everything" / "dist" / "index.js"
    proc = subprocess.Popen(
        ["node", str(script), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "listening" in line, line
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(WAIT_S)


def test_the_everything_server_over_streamable_http_maps_text_images_structured_content_and_errors(
    everything: str, workspace: Path
) -> None:
    server = McpServer(name="ev", url=everything, headers={"Authorization": "Bearer tok-123"})
    assert "tok-123" not in repr(server) and "tok-123" not in str(server)
    with McpTools([server]) as tools:
        assert tools.failures() == {}
        echoed = _call(tools, "ev__echo", {"message": "hi"}, workspace)
        assert echoed.content == "Echo: hi" and echoed.status == "ok"
        image = _call(tools, "ev__get-tiny-image", {}, workspace)
        parts = image.content
        assert isinstance(parts, tuple) and any(
            isinstance(p, ImagePart) and p.media_type == "image/png" for p in parts
        )
        structured = _call(tools, "ev__get-structured-content", {"location": "Chicago"}, workspace)
        assert structured.status == "ok" and "temperature" in str(structured.content)
        refused = _call(tools, "ev__get-structured-content", {"location": "Atlantis"}, workspace)
        assert refused.status == "error"


def test_a_server_that_cannot_start_is_left_out_and_its_calls_fail_with_a_reason(workspace: Path) -> None:
    broken = McpServer(name="gone", command="/nonexistent/mcp-server")
    with McpTools([broken], start_timeout_s=10) as tools:
        assert tools.schemas == () and "gone" in tools.failures()


def test_server_names_and_shapes_are_checked_before_anything_starts() -> None:
    for bad in ("", "has space", "a__b", "x" * 33):
        with pytest.raises(InputError):
            McpServer(name=bad, command="true")
    with pytest.raises(InputError):
        McpServer(name="both", command="true", url="http://127.0.0.1:1/mcp")
    with pytest.raises(InputError):
        McpServer(name="neither")
    with pytest.raises(InputError):
        McpServer(name="ftp", url="ftp://example/mcp")
    with pytest.raises(InputError):
        McpTools([McpServer(name="a", command="true"), McpServer(name="a", command="true")])


def test_tool_names_keep_to_what_providers_take() -> None:
    assert tool_name("fs", "read file.v2") == "fs__read_file_v2"
    assert len(tool_name("fs", "x" * 100)) == 64


def test_results_map_to_outcomes_by_the_module_table() -> None:
    import mcp_types as types

    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="one"),
            types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
        ],
        is_error=True,
    )
    outcome = outcome_of(result)
    assert outcome.status == "error"
    assert outcome.content == (TextPart("one"), TextPart("[audio audio/wav, 3 bytes, not shown]"))
    only = outcome_of(types.CallToolResult(content=[], structured_content={"a": 1}))
    assert only.content == '{"a": 1}' and only.status == "ok"
