"""The guide's two generated reference pages, in Markdown: every setting from the fields of
`Settings` (its one declaration), and every route of the API from the app's OpenAPI schema.
docs/hooks.py adds them to the site when `make docs` builds it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from service.core.settings import Settings

DEFAULT_CLAUSE = re.compile(r"[;:,]? default (.+)$")  # a description's closing "default X": the default shown


def env_name(field: str) -> str:
    return f"{Settings.model_config['env_prefix']}{field.upper()}"


def _default(info: FieldInfo) -> tuple[str, str]:
    """(the default as shown, the description without its closing default clause)."""
    text = " ".join((info.description or "").split())
    value = info.get_default(call_default_factory=True) if info.default is not PydanticUndefined \
        or info.default_factory else None
    if value in (None, "", []):
        found = DEFAULT_CLAUSE.search(text)
        return (found.group(1), text[:found.start()]) if found else ("none", text)
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, dict):
        value = json.dumps(value)
    elif isinstance(value, Path):
        value = str(value)
    return f"`{value}`", text


def _cell(text: str) -> str:
    """Text for a table cell: `|` escaped, and `<` outside code spans (`<home>` is no HTML tag)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def settings_page() -> str:
    rows = []
    for name, info in Settings.model_fields.items():
        default, meaning = _default(info)
        rows.append(f"| `{env_name(name)}` | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join([
        "# Settings",
        "",
        "Every setting of the service, read from `LCTX_*` environment variables (pydantic-settings;",
        "`service/core/settings.py`). This page is generated from the `Settings` class by `make docs`; a",
        "bad value stops the start with a message naming the variable. Paths are taken relative to",
        "the folder `lctx serve` starts in, once.",
        "",
        "| Setting (env) | Default | Meaning |",
        "|---|---|---|",
        *rows,
        "",
    ])


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return "`" + schema["$ref"].rsplit("/", 1)[-1] + "`"
    if schema.get("type") == "array" and "items" in schema:
        return f"list of {_schema_name(schema['items'])}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    return f"`{schema.get('type', 'object')}`"


def api_page(openapi: dict[str, Any]) -> str:
    """Each route with its summary, description, parameters, body and answers."""
    out = ["# API reference", "",
           f"{openapi['info']['title']} {openapi['info']['version']}: every route of the REST API, generated "
           "from the app's OpenAPI schema by `make docs`. A running service serves the same schema at "
           "`/openapi.json`, with Swagger UI at `/docs` and ReDoc at `/redoc`.", ""]
    for path, methods in openapi["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                out += [f"**{op['summary']}**", ""]
            if op.get("description"):
                out += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
                for p in params:
                    meaning = " ".join((p.get("description") or p.get("schema", {}).get("description") or "").split())
                    out.append(f"| `{p['name']}` | {p['in']} | {_cell(_schema_name(p.get('schema', {})))} | "
                               f"{'yes' if p.get('required') else 'no'} | {_cell(meaning)} |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out += [f"Body ({media}): {_schema_name(content.get('schema', {}))}", ""]
            answers = [f"{code} {' '.join((r.get('description') or '').split())}"
                       for code, r in op.get("responses", {}).items()]
            if answers:
                out += ["Answers: " + "; ".join(answers) + ".", ""]
    schemas = openapi.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### `{name}`", ""]
            if schema.get("description"):
                out += [" ".join(schema["description"].split()), ""]
            props = schema.get("properties", {})
            if props:
                required = set(schema.get("required", []))
                out += ["| field | type | required | meaning |", "|---|---|---|---|"]
                for field, sub in props.items():
                    meaning = " ".join((sub.get("description") or "").split())
                    out.append(f"| `{field}` | {_cell(_schema_name(sub))} | {'yes' if field in required else 'no'} "
                               f"| {_cell(meaning)} |")
                out.append("")
    return "\n".join(out) + "\n"


def app_openapi() -> dict[str, Any]:
    """The schema of an app on default settings (creating the app starts nothing)."""
    from service.app import create_app

    return create_app(Settings(_env_file=None)).openapi()
