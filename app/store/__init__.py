"""The store: SQLAlchemy 2 over SQLite or PostgreSQL, schema by Alembic."""
