"""Messages clients see name no server directory: paths under a root become relative to it,
the roots themselves are named by their settings (error responses and job errors alike)."""

from __future__ import annotations

from pathlib import Path

from service.views import client_text
from tests.helpers import make_settings


def test_client_text_makes_server_paths_relative(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, data_dir=tmp_path / "data")
    root, data = settings.roots[0], tmp_path / "data"
    message = (f"checkpoint {root}/my-model is not usable: {root}/my-model/config.json is not JSON; "
               f"text_file {data}/docs/a.txt not found; allowed roots: {root}, {data}; results {settings.results}/j1")
    assert client_text(message, settings) == (
        "checkpoint my-model is not usable: my-model/config.json is not JSON; text_file docs/a.txt not found; "
        "allowed roots: LCTX_CHECKPOINT_ROOTS, LCTX_DATA_DIR; results j1")
    assert str(tmp_path) not in client_text(message, settings)
    # A sibling whose name starts like a root is not a path under it; paths the client gave stay as given.
    assert client_text(f"{root}-old/x and /etc/passwd", settings) == f"{root}-old/x and /etc/passwd"


def test_job_errors_are_shown_relative(tmp_path: Path) -> None:
    from service.store import Store
    from service.views import job_out

    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.upgrade()
    row = store.add_job(fingerprint="f" * 64, checkpoint="m", checkpoint_path=str(settings.roots[0] / "m"),
                        tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0)
    assert store.claim_next("test").id == row.id
    store.finish(row.id, "failed", error=f"checkpoint {settings.roots[0]}/m is not usable: config.json is missing")
    out = job_out(store.get_job(row.id), settings)
    assert out.error == "checkpoint m is not usable: config.json is missing" and out.checkpoint_path == "m"
    store.close()


def test_a_results_document_names_no_server_path_anywhere(tmp_path: Path) -> None:
    """Errors, summaries and notes an evaluator or the coordinator wrote: every string of a
    results body is shown with client paths (and secrets masked in its errors)."""
    from service.views import client_results

    settings = make_settings(tmp_path, api_token="s3cret-token-value")
    root, home = settings.roots[0], settings.home.absolute()
    body = {"error": f"folder {root}/docs has no .txt files (token s3cret-token-value)",
            "results": {"perplexity": {"task": "perplexity", "partial": True,
                                       "error": f"cannot aggregate: see {settings.results}/j1/samples.jsonl",
                                       "result": {"summary": f"read {root}/docs/a.txt", "extra": {"notes": [
                                           f"cache {home}/cache/x"]}}}}}
    out = client_results(body, settings, settings.results / "j1")
    assert out["error"] == "folder docs has no .txt files (token ***)"
    entry = out["results"]["perplexity"]
    assert entry["error"] == "cannot aggregate: see j1/samples.jsonl"
    assert entry["result"] == {"summary": "read docs/a.txt", "extra": {"notes": ["cache cache/x"]}}
    assert str(tmp_path) not in repr(out)
