"""Alembic environment: always online, on the connection `Store.upgrade()` passes in
`config.attributes["connection"]` (inside its transaction and, on PostgreSQL, its lock)."""

from __future__ import annotations

from alembic import context

from service.store import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run lctx migrations through service.store.Store.upgrade(), which passes a connection")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
