"""`cairn report` as a reader sees it: every page rendered by Debian's headless Chromium (issue 27).

Playwright (`playwright-core` from the npm registry, `browser/render.mjs`) drives `/usr/bin/chromium`
over every page of the report of the audit store (the demo's sessions, every event kind, a corrupt
session) in a 1,280-pixel window, and says what each page rendered: its width, its headings, its
tables' visible text, its pictures, and a full-page screenshot. The tests check that no page is
wider than the window, that every section and picture is drawn, that the numbers the browser shows
are the log's, and that no screenshot is blank (a blank page, the known-bad input, is caught).
`.ci/run` installs Chromium where it can; elsewhere these tests are skipped, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops

from cairn import cli
from cairn.audit.report import page_key
from cairn.events.kinds import CheckpointCommitted, TurnStarted, UserMessage
from cairn.events.model import TextPart
from cairn.store import Journal
from tests.audit.conftest import BROKEN
from tests.npm import npm_install

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HERE = Path(__file__).parent
#: the window the pages are drawn in: a laptop's
WIDTH = 1280

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or shutil.which("npm") is None,
    reason="needs Debian's chromium (apt-get install chromium) and npm",
)

#: a page with nothing on it but white: what `blank` must catch
BLANK_PAGE = "<!DOCTYPE html><html><head><title>nothing</title></head><body></body></html>"


def blank(screenshot: Path) -> bool:
    """Whether a screenshot shows next to nothing: under 2 % of its pixels visibly unlike its corner's."""
    with Image.open(screenshot) as image:
        pixels = image.convert("RGB")
        background = Image.new("RGB", pixels.size, pixels.getpixel((0, 0)))
        # per pixel: 255 where any channel differs from the corner's, else 0 (all in Pillow's C code)
        differs = ImageChops.difference(pixels, background).convert("L").point(lambda v: 255 if v else 0)
        counts = differs.histogram()
    return counts[255] < 0.02 * sum(counts)


@pytest.fixture(scope="module")
def rendered(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every page of the report, and the blank page, as the browser drew them, by file name."""
    out = tmp_path_factory.mktemp("browser-report") / "html"
    assert cli.main(["report", "--store", str(pristine), "--out", str(out)]) == 1  # a session is corrupt
    blank_page = out.parent / "blank.html"
    blank_page.write_text(BLANK_PAGE, encoding="utf-8")
    pages = [out / "index.html", out / "verify.html", *sorted((out / "sessions").glob("*.html")), blank_page]
    node = npm_install(HERE / "browser", tmp_path_factory.mktemp("browser-node"), "render.mjs")
    shots = tmp_path_factory.mktemp("screenshots")
    assert CHROMIUM is not None
    done = subprocess.run(
        ["node", "render.mjs", CHROMIUM, str(shots), str(WIDTH), *(p.as_uri() for p in pages)],
        cwd=node,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    drawn = json.loads(done.stdout)
    assert len(drawn) == len(pages)
    return {Path(page["url"].removeprefix("file://")).name: page for page in drawn}


def _report_pages(rendered: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: page for name, page in rendered.items() if name != "blank.html"}


def test_no_page_is_wider_than_the_window(rendered: dict[str, dict[str, Any]]) -> None:
    """A table too wide for a laptop's window once pushed the verify column off the index."""
    wide = {
        name: page["scrollWidth"]
        for name, page in _report_pages(rendered).items()
        if page["scrollWidth"] > WIDTH
    }
    assert wide == {}
    assert len(_report_pages(rendered)) == 2 + 12 + 11  # index, verify, each session, each sound transcript


def test_every_section_and_picture_is_drawn(pristine: Path, rendered: dict[str, dict[str, Any]]) -> None:
    for name, page in _report_pages(rendered).items():
        assert page["headings"], name
        for heading in page["headings"]:
            box = heading["box"]
            assert box["height"] > 10 and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (name, heading)
        for picture in page["pictures"]:
            assert picture["loaded"], (name, picture["src"])
            assert picture["box"]["width"] >= 600 and picture["box"]["height"] >= 200, (name, picture)
    index = rendered["index.html"]
    assert [h["text"] for h in index["headings"]] == [f"cairn report of {pristine}", "totals", "sessions"]
    assert [p["src"] for p in index["pictures"]] == ["store.svg"]
    demo = rendered[f"{page_key('demo-3')}.html"]
    assert [h["text"].split(" (")[0] for h in demo["headings"]] == [
        "session demo-3",
        "timeline",
        "checkpoints",
        "tools",
        "errors and failures",
        "verify",
    ]


def test_the_numbers_the_browser_shows_are_the_logs(
    pristine: Path, rendered: dict[str, dict[str, Any]]
) -> None:
    def table(page: dict[str, Any], css: str) -> list[list[str]]:
        (found,) = [t for t in page["tables"] if t["class"] == css]
        return [[cell.strip() for cell in row] for row in found["rows"]]

    totals = dict((row[0], row[1]) for row in table(rendered["index.html"], "totals"))
    with Journal.open(pristine, readonly=True) as journal:
        sound = [s.sid for s in journal.sessions() if s.sid != BROKEN]
        records = {sid: list(journal.read(sid)) for sid in sound}
    assert totals["sessions"] == f"{len(sound):,}"
    assert totals["events"] == f"{sum(len(r) for r in records.values()):,}"
    started = sum(isinstance(r.event, TurnStarted) for rs in records.values() for r in rs)
    assert totals["turns"].startswith(f"{started:,} started")
    shown = {row[0] for row in table(rendered["index.html"], "sessions")[1:]}
    assert shown == {*sound, BROKEN}
    for sid in (f"demo-{k}" for k in range(1, 6)):
        page = rendered[f"{page_key(sid)}.html"]
        checkpoints = [r.seq for r in records[sid] if isinstance(r.event, CheckpointCommitted)]
        assert checkpoints, sid  # the demo compacts every session
        assert [row[1] for row in table(page, "checkpoints")[1:]] == [f"{seq:,}" for seq in checkpoints]
        first = next(r.event for r in records[sid] if isinstance(r.event, UserMessage))
        said = next(p.text for p in first.content if isinstance(p, TextPart))
        transcript = rendered[f"{page_key(sid)}-transcript.html"]["text"]
        assert said.splitlines()[0] in transcript


def test_no_screenshot_is_blank_and_a_blank_page_is_caught(rendered: dict[str, dict[str, Any]]) -> None:
    assert blank(Path(rendered["blank.html"]["screenshot"]))  # the known-bad input
    for name, page in _report_pages(rendered).items():
        shot = Path(page["screenshot"])
        with Image.open(shot) as image:
            assert image.size[0] == WIDTH, name
        assert not blank(shot), name
