"""Every exception the runtime's own modules define sits under `CairnError` (STYLE 16)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import cairn.actors.host
import cairn.actors.session
from cairn.actors.placement import PlacementError
from cairn.actors.tools import ToolError
from cairn.actors.workspace_fs import Refused
from cairn.events.errors import CairnError, InputError

#: the modules checked: the host, the session and the shared leaves
MODULES = [
    "cairn.actors.errors",
    "cairn.actors.placement",
    "cairn.actors.tokens",
    "cairn.actors.tools",
    "cairn.actors.workspace_fs",
    *(f"cairn.actors.host.{info.name}" for info in pkgutil.iter_modules(cairn.actors.host.__path__)),
    *(f"cairn.actors.session.{info.name}" for info in pkgutil.iter_modules(cairn.actors.session.__path__)),
]


@pytest.mark.parametrize("name", MODULES)
def test_every_public_exception_is_a_cairn_error(name: str) -> None:
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
            if attr.startswith("_"):
                continue  # private control flow, caught where it is raised (workspace_fs._Retry)
            assert issubclass(value, CairnError), f"{name}.{attr}"


def test_the_tool_and_placement_errors_blame_their_input() -> None:
    for error in (ToolError, Refused, PlacementError):
        assert issubclass(error, InputError) and issubclass(error, ValueError)
