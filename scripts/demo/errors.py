"""The demo's own errors: it cannot run as asked, or its store failed during the run."""

from __future__ import annotations

from cairn.events.errors import InputError
from cairn.store.errors import StorageError


class DemoSetupError(InputError):
    """The demo cannot run as asked (an endpoint not configured, a store of another model)."""


class DemoStoreFailed(StorageError):
    """The store failed during the run (a full disk, an I/O error): the demo stopped its sessions."""
