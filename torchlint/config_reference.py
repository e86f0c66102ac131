"""Regenerate the key reference in docs/configuration.md from `config.SCHEMA`: `python -m torchlint.config_reference`.

The page's prose is written by hand; the part between the markers is this module's
output, and tests/test_config_reference.py checks that it is up to date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from torchlint.config import SCHEMA

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
_TYPES = {list: "list of strings", dict: "table", bool: "boolean", str: "string", int: "whole number", float: "number"}


def reference() -> str:
    """Every key of `[tool.torchlint]`: a summary table, then a section each with its type, default and an example."""
    lines = ["| key | type | default |", "|---|---|---|"]
    lines += [f"| [`{key.name}`](#{key.name}) | {_TYPES[key.type]} | {key.default} |" for key in SCHEMA]
    for key in SCHEMA:
        lines += [
            "", f"### `{key.name}`", "", key.description, "",
            f"Type: {_TYPES[key.type]}. Default: {key.default}.", "",
            "```toml", "[tool.torchlint]", key.example, "```",
        ]
    return "\n".join(lines)


def render(page: str) -> str:
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(page):
        raise ValueError(f"{PAGE}: no {START} ... {END} markers")
    return pattern.sub(lambda _: f"{START}\n{reference()}\n{END}", page)


def main() -> int:
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
