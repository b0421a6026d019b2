"""The compactor: verified replacements of an over-full history (CONTEXT-RULES C, F, K, W)."""

from cairn.actors.compactor.breaker import BreakerView, breaker_view
from cairn.actors.compactor.checkpoint import (
    rederive_replacement,
    source_hash,
    strip_handoff,
    verify_checkpoint,
)
from cairn.actors.compactor.errors import (
    AuditMismatch,
    CompactionBlocked,
    CompactionError,
    CompactionIneffective,
    FallbackOverTarget,
    NothingToCompact,
)
from cairn.actors.compactor.gates import effect_target, manual_compaction_due
from cairn.actors.compactor.hooks import HookContext, HookVerdict, PreCompactionHook
from cairn.actors.compactor.service import CompactionConfig, CompactionOutcome, CompactionRequest, Compactor

__all__ = [
    "AuditMismatch",
    "BreakerView",
    "CompactionBlocked",
    "CompactionConfig",
    "CompactionError",
    "CompactionIneffective",
    "CompactionOutcome",
    "CompactionRequest",
    "Compactor",
    "FallbackOverTarget",
    "HookContext",
    "HookVerdict",
    "NothingToCompact",
    "PreCompactionHook",
    "breaker_view",
    "effect_target",
    "manual_compaction_due",
    "rederive_replacement",
    "source_hash",
    "strip_handoff",
    "verify_checkpoint",
]
