"""vLLM ``--gpu-memory-utilization`` derived from ``memory_mib`` (R-GPS-4).

vLLM pre-allocates that fraction of the *whole* GPU, so it must never exceed
the member's admitted share: the fraction is rounded **down** to two decimals,
in integer arithmetic (a float ``0.29 * 100`` is ``28.999…``). A user argument
that says otherwise is rejected, not silently overridden: the tenant would
otherwise debug a number they did not set.
"""

# Decisions embodied here (docs/decisions.md):
# * “Exact budget arithmetic”

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.gps.reservations import format_mib

FLAG = "--gpu-memory-utilization"
_SPELLINGS = (FLAG, "--gpu_memory_utilization")  # vLLM's parser accepts both


def gpu_memory_utilization(memory_mib: int, gpu_memory_mib: int) -> Decimal:
    """``memory_mib / gpu_memory_mib`` rounded down to 2 decimals; must land in (0, 1]."""
    if gpu_memory_mib < 1:
        raise SpecInvalid(
            [FieldError("gpu_memory_mib", "too_small", "use the GPU's memory in MiB (>= 1)")]
        )
    hundredths = memory_mib * 100 // gpu_memory_mib
    if hundredths < 1 or memory_mib > gpu_memory_mib:
        raise SpecInvalid(
            [
                FieldError(
                    "memory_mib",
                    "memory_out_of_range",
                    f"use between {format_mib(-(-gpu_memory_mib // 100))} and "
                    f"{format_mib(gpu_memory_mib)} MiB (vLLM needs a utilization in [0.01, 1.00])",
                )
            ]
        )
    return Decimal(hundredths) / 100


def render_vllm_args(
    user_args: Sequence[str],
    memory_mib: int,
    gpu_memory_mib: int,
    *,
    path: str = "args",
) -> tuple[str, ...]:
    """The user's args plus ``--gpu-memory-utilization X``; a contradicting user value is
    ``SpecInvalid``.

    An equal user value (``0.27`` or ``0.270``, either spelling, ``=`` or
    separate) is accepted and not duplicated.
    """
    util = gpu_memory_utilization(memory_mib, gpu_memory_mib)
    problems: list[FieldError] = []
    agreed = False
    for i, value in _user_values(user_args):
        fix = (
            f"remove it: the server sets {FLAG} {util} from memory_mib {format_mib(memory_mib)} "
            f"of {format_mib(gpu_memory_mib)} MiB; change memory_mib instead"
        )
        if value is None:
            problems.append(FieldError(f"{path}[{i}]", "gpu_memory_utilization_missing_value", fix))
            continue
        try:
            given = Decimal(value)
        except InvalidOperation:
            given = None
        if given is None or not given.is_finite() or given != util:
            problems.append(
                FieldError(
                    f"{path}[{i}]",
                    "gpu_memory_utilization_conflict",
                    f"{value!r} contradicts {util}; {fix}",
                )
            )
        else:
            agreed = True
    if problems:
        raise SpecInvalid(problems)
    return tuple(user_args) if agreed else (*user_args, FLAG, str(util))


def _user_values(args: Sequence[str]) -> list[tuple[int, str | None]]:
    """``(index of the flag, its value or None)`` for every utilization flag in ``args``."""
    out: list[tuple[int, str | None]] = []
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if name not in _SPELLINGS:
            continue
        if eq:
            out.append((i, inline))
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((i, args[i + 1]))
        else:
            out.append((i, None))
    return out
