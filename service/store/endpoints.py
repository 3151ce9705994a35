"""Registered served models (endpoints). Methods return detached rows."""

from __future__ import annotations

from sqlalchemy import select

from service.errors import Conflict, Missing
from service.store.db import Database, retried
from service.store.models import CheckpointRow, EndpointRow


class EndpointAccess(Database):
    """The store's access to endpoints: register, look up, list, delete."""

    def add_endpoint(self, row: EndpointRow) -> EndpointRow:
        """Register; the same name again replaces the registration (re-probed by the caller)."""
        with self.writing() as s:
            if s.get(CheckpointRow, row.name) is not None:
                raise Conflict(f"{row.name!r} is already a checkpoint's name; pick another name for the endpoint")
            old = s.get(EndpointRow, row.name)
            if old is not None:
                s.delete(old)
                s.flush()
            s.add(row)
            return row

    @retried
    def get_endpoint(self, name: str) -> EndpointRow:
        with self.reading() as s:
            row = s.get(EndpointRow, name)
        if row is None:
            raise Missing("endpoint", name)
        return row

    def list_endpoints(self) -> list[EndpointRow]:
        with self.reading() as s:
            return list(s.scalars(select(EndpointRow).order_by(EndpointRow.name)))

    def delete_endpoint(self, name: str) -> None:
        with self.writing() as s:
            row = s.get(EndpointRow, name)
            if row is None:
                raise Missing("endpoint", name)
            s.delete(row)
