"""Alembic environment: always online, on the connection `Store.upgrade()` passes in
`config.attributes["connection"]` (inside its transaction and, on PostgreSQL, its lock). Once
the newest revision is reached, the leaderboard's rows of jobs already run are filled if 0007
asked for it (it marks `fill_results`; its settings name the results folder)."""

from __future__ import annotations

import logging

from alembic import context

from service.store import Base

log = logging.getLogger("lctx.store")

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run lctx migrations through service.store.Store.upgrade(), which passes a connection")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
context.config.attributes.pop("fill_results", None)
with context.begin_transaction():
    context.run_migrations()
    succeeded = context.config.attributes.pop("fill_results", None)
    if succeeded is not None and context.get_context().get_current_revision() == context.get_head_revision():
        # 0007 ran: the leaderboard's rows of jobs already run, written once the newest revision is
        # reached by the code that writes that revision's layout
        from service.standings import fill

        filled = fill(connection, context.config.attributes["settings"])
        log.info("the leaderboard: %d of %d succeeded jobs filled from their results", filled, succeeded)
