"""Installing packages from the npm registry for the tests that run programs nobody here wrote."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: npm may fetch from the registry the first time: bounded, not instant
INSTALL_TIMEOUT_S = 300


def npm_install(sources: Path, folder: Path, *names: str) -> Path:
    """`folder` with `sources`' `package.json` (and the files `names`) and its dependencies installed."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", *names):
        shutil.copy(sources / name, folder / name)
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert done.returncode == 0, f"npm install failed: {done.stderr[-2000:]}"
    return folder
