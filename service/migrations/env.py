"""Alembic environment: always online, on the connection `Store.upgrade()` passes in
`config.attributes["connection"]` (inside its transaction and, on PostgreSQL, its lock). Once
the newest revision is reached, the data migrations the revisions asked for (0007: the
leaderboard's rows of jobs already run; `config.attributes["data_migrations"]`) are registered
in `data_migrations`, in the schema's transaction; service/upgrades.py runs them in batches."""

from __future__ import annotations

from alembic import context

from service.store import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run lctx migrations through service.store.Store.upgrade(), which passes a connection")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
context.config.attributes.pop("data_migrations", None)
with context.begin_transaction():
    context.run_migrations()
    asked = context.config.attributes.pop("data_migrations", None)
    if asked and context.get_context().get_current_revision() == context.get_head_revision():
        from service.upgrades import register

        register(connection, asked)
