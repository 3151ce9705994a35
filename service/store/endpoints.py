"""Registered served models (endpoints). Methods return detached rows."""

from __future__ import annotations

from service.core.errors import Conflict
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
        return self.named(EndpointRow, "endpoint", name)

    def list_endpoints(self) -> list[EndpointRow]:
        return self.all_named(EndpointRow)

    def delete_endpoint(self, name: str) -> None:
        self.delete_named(EndpointRow, "endpoint", name)
