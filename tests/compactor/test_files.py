"""Recent-file restoration (W1-W3) on real files, real symlinks, real tmp dirs."""

from __future__ import annotations

import os

from cairn.actors.compactor.files import files_message, plan_restoration, read_recent_files
from cairn.events.kinds import FileAccess
from tests.compactor.builders import Log, compactor, request, text


def _recording_opener(opened: list[str]):
    def opener(path: str):
        opened.append(path)
        return open(path, "rb")

    return opener


def _workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    return ws, outside


def test_W1_filter_first_then_take_five(tmp_path) -> None:
    ws, _ = _workspace(tmp_path)
    other = tmp_path / "other-ws"
    other.mkdir()
    accesses = []
    for n in range(6):  # the six newest accesses are of another workspace
        (other / f"o{n}.py").write_text("other\n")
        accesses.append(FileAccess(str(other / f"o{n}.py"), "read", ts=100 - n))
    for n in range(7):
        (ws / f"f{n}.py").write_text(f"mine {n}\n")
        accesses.append(FileAccess(str(ws / f"f{n}.py"), "read", ts=50 - n))
    plan = plan_restoration(accesses, str(ws))
    got = read_recent_files(plan, str(ws))
    assert [f.path for f in got.files] == ["f0.py", "f1.py", "f2.py", "f3.py", "f4.py"]
    assert len(got.rejected) == 6


def test_W1_deleted_and_missing_files_are_skipped_without_using_a_slot(tmp_path) -> None:
    ws, _ = _workspace(tmp_path)
    for n in range(6):
        (ws / f"f{n}.py").write_text("x\n")
    accesses = [
        FileAccess("gone.py", "delete", ts=99),
        FileAccess("never-existed.py", "read", ts=98),
        *(FileAccess(f"f{n}.py", "write", ts=90 - n) for n in range(6)),
    ]
    got = read_recent_files(plan_restoration(accesses, str(ws)), str(ws))
    assert [f.path for f in got.files] == [f"f{n}.py" for n in range(5)]
    assert "never-existed.py" in got.rejected


def test_W2_first_200_lines_and_a_note_of_the_rest(tmp_path) -> None:
    ws, _ = _workspace(tmp_path)
    (ws / "long.txt").write_text("".join(f"line {n}\n" for n in range(250)))
    got = read_recent_files(plan_restoration([FileAccess("long.txt")], str(ws)), str(ws))
    (restored,) = got.files
    assert restored.text.splitlines()[-1] == "line 199" and restored.more_lines == 50
    message = files_message(got.files, "ckpt-1-files")
    assert message is not None and message.meta.hidden and message.meta.origin == "recent-files"
    body = text(message)
    assert "recently accessed" in body and "### long.txt" in body and "(50 more lines not shown)" in body


def test_W3_dotdot_escapes_and_symlinks_to_outside_are_never_read(tmp_path) -> None:
    ws, outside = _workspace(tmp_path)
    (ws / "inside.txt").write_text("fine\n")
    os.symlink(outside / "secret.txt", ws / "link-out.txt")
    os.symlink(outside, ws / "dir-out")
    os.symlink(ws / "inside.txt", ws / "link-in.txt")
    accesses = [
        FileAccess("../outside/secret.txt", ts=9),
        FileAccess(str(outside / "secret.txt"), ts=8),
        FileAccess("link-out.txt", ts=7),
        FileAccess("dir-out/secret.txt", ts=6),
        FileAccess("sub/../../outside/other.txt", ts=5),
        FileAccess("link-in.txt", ts=4),
    ]
    opened: list[str] = []
    plan = plan_restoration(accesses, str(ws))
    got = read_recent_files(plan, str(ws), opener=_recording_opener(opened))
    assert opened == [os.path.realpath(ws / "inside.txt")]
    assert [f.path for f in got.files] == ["link-in.txt"]
    assert all("TOP SECRET" not in f.text for f in got.files)
    assert {"../outside/secret.txt", "sub/../../outside/other.txt"} <= set(plan.rejected)


def test_W3_the_service_restores_only_what_passes(tmp_path) -> None:
    ws, outside = _workspace(tmp_path)
    (ws / "main.py").write_text("def main(): ...\n")
    os.symlink(outside / "secret.txt", ws / "innocent.py")
    log = Log(workspace=str(ws))
    log.turn("Improve main.py")
    for n in range(10):
        log.tool(
            f"out {n} " + "k" * 3000,
            files=(FileAccess("main.py"), FileAccess("innocent.py"), FileAccess("../outside/secret.txt")),
        )
    service, provider = compactor()
    outcome = service.compact(request(log.state(), workspace=str(ws)))
    assert outcome.checkpoint.files_restored == ("main.py",)
    assert "TOP SECRET" not in "".join(str(m.content) for r in provider.requests for m in r.messages)
    assert "TOP SECRET" not in "".join(str(m.content) for m in outcome.replacement)
    assert set(outcome.checkpoint.diagnostics.omitted_files) == {"innocent.py", "../outside/secret.txt"}
