"""The attention backends: the one list of their names.

`reference` runs the dense formula of each variant (the oracle; it can return
the weights), `torch` the chunked PyTorch paths that stream over key blocks,
`triton` the fused kernels; `auto` takes Triton on CUDA and the chunked path
elsewhere. A model resolves its backend once, when it is set or the model
moves to another device, and layers read the resolved one from the
`AttentionContext`.

Imports nothing heavy (no torch): the API schemas and the command line take
their lists of names from here."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from checkpoints.errors import ConfigError


class Backend(StrEnum):
    AUTO = "auto"
    REFERENCE = "reference"
    TORCH = "torch"
    TRITON = "triton"

    @classmethod
    def parse(cls, name: str | Backend) -> Backend:
        """The backend called `name`; a ConfigError naming the choices otherwise."""
        try:
            return cls(name)
        except ValueError:
            raise ConfigError(
                f"unknown attention backend {name!r}; choose one of {', '.join(cls)}"
            ) from None

    def resolve(self, device: Any) -> Backend:
        """What runs on `device` (a torch.device): `auto` becomes `triton` on
        CUDA and `torch` elsewhere; any other backend is itself."""
        if self is Backend.AUTO:
            return Backend.TRITON if device.type == "cuda" else Backend.TORCH
        return self


# The Triton kernels are forward-only: training runs every other backend.
TRAINING_BACKENDS = tuple(b.value for b in Backend if b is not Backend.TRITON)
