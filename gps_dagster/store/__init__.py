"""The product's own tables (SQLAlchemy): SQLite by default, PostgreSQL in production."""

from gps_dagster.store.repository import GATES, Store

__all__ = ["GATES", "Store"]
