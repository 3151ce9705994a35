"""Registered checkpoints. Methods return detached rows."""

from __future__ import annotations

from sqlalchemy import select

from service.core.errors import Conflict
from service.store.db import Database, retried
from service.store.models import CheckpointRow, now


class CheckpointAccess(Database):
    """The store's access to checkpoints: register, look up, list, delete."""

    def add_checkpoint(self, name: str, path: str, fingerprint: str, variant: str, parameters: int) -> CheckpointRow:
        """Register; the same name and path again refreshes the fingerprint."""
        with self.writing() as s:
            row = s.get(CheckpointRow, name)
            if row is not None and row.path != path:
                raise Conflict(f"checkpoint name {name!r} is already registered for {row.path}; "
                               "pick another name or delete the old one first")
            if row is None:
                row = CheckpointRow(name=name, path=path, fingerprint=fingerprint, variant=variant,
                                    parameters=parameters, created_at=now())
                s.add(row)
            else:
                row.fingerprint, row.variant, row.parameters = fingerprint, variant, parameters
            return row

    @retried
    def get_checkpoint(self, name: str) -> CheckpointRow:
        return self.named(CheckpointRow, "checkpoint", name)

    @retried
    def find_checkpoint(self, name: str) -> CheckpointRow | None:
        with self.reading() as s:
            return s.get(CheckpointRow, name)

    def checkpoint_by_path(self, path: str) -> CheckpointRow | None:
        with self.reading() as s:
            return s.scalars(select(CheckpointRow).where(CheckpointRow.path == path).limit(1)).first()

    def list_checkpoints(self) -> list[CheckpointRow]:
        return self.all_named(CheckpointRow)

    def delete_checkpoint(self, name: str) -> None:
        self.delete_named(CheckpointRow, "checkpoint", name)
