"""docs/configuration.md documents every config key, with the code's defaults; the file map
of docs/architecture.md names every module of the package, and only those.

Keys are written as in the doc: a top-level key bare (`state_dir`), a section key dotted
(`server.webhook_port`), a key of a `[[routes]]` entry as `routes[].mode`. Each key has a
row in a reference table: `| `key` | type | default | unit | meaning |`.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from wakeline.config import Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
ROW = re.compile(r"^\|\s*`(?P<key>[^`]+)`(?:\s*†)?\s*\|(?P<rest>.*)$")


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool | str]:
    """The section model a field holds, and whether it is a list of them (`[[...]]`), or
    `"named"` for a table of them by name (`[section.NAME]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, True
    if typing.get_origin(annotation) is dict:
        _, item = typing.get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, "named"
    return None, False


def _walk(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every documented leaf key of `model`, depth first, in declaration order."""
    for name, field in model.model_fields.items():
        if field.exclude:
            continue  # base_dir: set by the loader, not a key a user may write
        section, many = _model_of(field.annotation)
        if section is not None:
            suffix = ".NAME" if many == "named" else "[]" if many else ""
            yield from _walk(section, f"{prefix}{name}{suffix}.")
        else:
            yield prefix + name, field


def _sections(model: type[BaseModel]) -> Iterator[tuple[str, bool]]:
    for name, field in model.model_fields.items():
        section, many = _model_of(field.annotation)
        if section is not None:
            yield name, many


def _all_models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    yield model
    for field in model.model_fields.values():
        section, _ = _model_of(field.annotation)
        if section is not None:
            yield from _all_models(section)


def _toml(value: Any) -> str:
    """A default as the doc writes it (TOML syntax)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise AssertionError(f"no TOML form for {value!r}")


def _expected_default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    return f"`{_toml(value)}`"


def _reference_rows() -> dict[str, list[str]]:
    """Key -> cells of its row, from the tables under `## Reference`."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Reference")
    end = text.find("\n## ", start + 1)
    rows: dict[str, list[str]] = {}
    for line in text[start : end if end != -1 else None].splitlines():
        match = ROW.match(line.strip())
        if match:
            key = match["key"]
            assert key not in rows, f"{key} has two rows"
            rows[key] = [cell.strip() for cell in match["rest"].rstrip("|").split("|")]
    return rows


KEYS = dict(_walk(Config))
ROWS = _reference_rows()


def test_the_walk_sees_every_section() -> None:
    assert {"state_dir", "server.webhook_port", "linear.freshness_seconds", "inbox.following",
            "agent.command", "routes[].mode", "routes[].command"} <= set(KEYS)
    assert "base_dir" not in KEYS


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_key_has_a_row(key: str) -> None:
    assert key in ROWS, f"docs/configuration.md has no reference row for `{key}`"


@pytest.mark.parametrize("key", sorted(KEYS))
def test_documented_default_matches_the_code(key: str) -> None:
    cells = ROWS.get(key)
    assert cells is not None, f"no row for {key}"
    assert len(cells) >= 4, f"row of {key} needs type, default, unit and meaning"
    default_cell = cells[1]
    assert default_cell == _expected_default(KEYS[key]), f"default of {key}"
    assert cells[3], f"row of {key} has no meaning"


def test_no_row_documents_a_key_the_code_lacks() -> None:
    assert set(ROWS) - set(KEYS) == set()


@pytest.mark.parametrize("name,many", sorted(_sections(Config)))
def test_every_section_has_a_heading(name: str, many: bool) -> None:
    heading = f"`[[{name}]]`" if many else f"`[{name}]`"
    assert f"### {heading}" in DOC.read_text(encoding="utf-8")


def test_the_route_replacement_rule_is_stated() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "replaces the default route" in text


@pytest.mark.parametrize(
    "model", sorted(set(_all_models(Config)), key=lambda m: m.__name__), ids=lambda m: m.__name__
)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing = [n for n, f in model.model_fields.items() if not (f.description or "").strip()]
    assert missing == [], f"{model.__name__} fields without a description: {missing}"



# --- docs/architecture.md's file map -------------------------------------------------------

ARCHITECTURE = DOC.parent / "architecture.md"
PACKAGE = DOC.parents[1] / "wakeline"
MODULE_PATH = re.compile(r"`(wakeline/[\w/]+\.py)`")


def _file_map() -> set[str]:
    """The modules the file map names: every backticked `wakeline/....py` path under
    `## File map`, up to the next `## ` section."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("\n## File map")
    end = text.find("\n## ", start + 1)
    return set(MODULE_PATH.findall(text[start : end if end != -1 else None]))


def _modules() -> set[str]:
    return {path.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*.py")}


def test_the_file_map_lists_every_module() -> None:
    missing = sorted(_modules() - _file_map())
    assert missing == [], f"docs/architecture.md's file map lacks {missing}"


def test_the_file_map_names_no_module_that_does_not_exist() -> None:
    gone = sorted(_file_map() - _modules())
    assert gone == [], f"docs/architecture.md's file map names modules that do not exist: {gone}"
