"""The product's own tables (SQLAlchemy): SQLite by default, PostgreSQL in production."""
