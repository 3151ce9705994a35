"""Suite-wide settings and the fixtures several test packages share. Triton kernels run
in the interpreter when no GPU is present; the variable must be set before triton is first
imported. Ray and PostgreSQL start once per session (they take seconds)."""

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

from tests.helpers import PG_BIN, Postgres, tiny_checkpoint  # noqa: E402 - after the Triton switch


@pytest.fixture(scope="session")
def postgres_url() -> str:
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        pytest.skip(f"no PostgreSQL binaries in {PG_BIN} (initdb, pg_ctl); install postgresql-15 to run this test")
    pg = Postgres().start()
    yield pg.url
    pg.stop()


@pytest.fixture(scope="session")
def ray_cluster() -> str:
    """A local Ray with two CPUs, started by this process; servers in subprocesses join it."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}})
    address = ray.get_runtime_context().gcs_address
    yield address
    ray.shutdown()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    tiny_checkpoint(root / "tiny")
    return root
