"""Whether reading a tensor's value back to the host makes the host wait for a device.

A forward pass reads nothing back (issue #41: a read per layer of every decode step kept
the GPU idle between kernels). The one exception is a loop that may stop early on what
it reads (entmax's Newton search in PyTorch): it reads only where reading is free, a
CPU tensor, and runs its full iterations elsewhere. Tests patch `reads_are_free` to
check that a forward on an accelerator would read nothing."""

from __future__ import annotations

import torch


def reads_are_free(tensor: torch.Tensor) -> bool:
    """True for a CPU tensor: its value is already on the host."""
    return tensor.device.type == "cpu"
