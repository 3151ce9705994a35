"""Alembic migrations of the store, shipped inside the package and run by
`service.store.Store.upgrade()` (no alembic.ini: the script location is this folder).

A schema change is a new file in `versions/` whose `down_revision` is the current head;
write its operations out (`op.add_column(...)`), check it with
`tests/service/migrations/test_migrations.py` (the models and the migrated schema must agree)."""
