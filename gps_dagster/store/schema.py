"""The single SQLAlchemy ``MetaData`` that every product table is declared on.

Tables are declared in the modules of their concern (``store/tables.py`` for
schedules, claims, status, actions, events, control; ``store/reservation_tables.py``
for the GPS ledger) and created by Alembic migrations under
``store/migrations/``. Tables carry no schema: on PostgreSQL the engine maps
them into the ``gps`` schema (see ``store/db.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING)


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out — on SQLite too.

    SQLite has no time zone type; storing naive UTC and re-attaching UTC on
    the way out keeps every datetime in the product aware (naive ones are
    refused rather than guessed).
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime refused: {value!r}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
