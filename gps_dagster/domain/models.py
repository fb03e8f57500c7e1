"""Shared pydantic base for frozen domain documents."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable, strict about unknown fields: a typo is an error, not a silent default."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
