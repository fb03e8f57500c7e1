"""Deploy kinds and what a schedule may do with them (SPEC R-SCALE-7, R-PASS-4).

Nothing is silently reinterpreted: a kind either supports an operation, or the
caller gets a reason code it can show to the operator.
"""

from __future__ import annotations

from enum import StrEnum


class DeployKind(StrEnum):
    DGD = "dgd"
    """Dynamo graph deployment, aggregated, role ``serve``, fixed replicas."""
    DGD_SCALING_ADAPTER = "dgd_scaling_adapter"
    """DGD driven by a scaling adapter (SLA planner): start/stop only."""
    DGD_DISAGGREGATED = "dgd_disaggregated"
    """Disaggregated prefill/decode: scaling is rejected."""
    DEPLOYMENT = "deployment"
    LEADER_WORKER_SET = "lws"
    KSERVE = "kserve"
    KNATIVE = "knative"
    FINETUNE = "finetune"
    BATCH = "batch"
    FWC = "fwc"
    OTHER = "other"
    """A workload kind the product does not manage (a labelled StatefulSet, DaemonSet, ...)."""


UNSUPPORTED_KINDS = frozenset(
    {DeployKind.FINETUNE, DeployKind.BATCH, DeployKind.FWC, DeployKind.OTHER}
)
"""Kinds a schedule may not touch at all: ``ineligible{unsupported_kind}``."""


def scale_refusal(kind: DeployKind, *, hpa: bool = False, cmp_endpoint: bool = False) -> str | None:
    """Why a schedule may not set replicas on this deploy, or ``None`` if it may.

    The answer is a reason code; every refusal maps to
    ``unsupported_scale_for_mode`` in the phase machine.
    """
    if cmp_endpoint:
        return "cmp_endpoint_start_stop_only"
    if kind in UNSUPPORTED_KINDS:
        return "unsupported_kind"
    if kind is DeployKind.DGD:
        return None
    if kind in (DeployKind.DEPLOYMENT, DeployKind.LEADER_WORKER_SET):
        return "hpa_managed" if hpa else None
    if kind is DeployKind.DGD_SCALING_ADAPTER:
        return "scaling_adapter"
    if kind is DeployKind.DGD_DISAGGREGATED:
        return "disaggregated"
    return "autoscaled_kind"  # KServe / Knative
