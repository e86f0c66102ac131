"""Regenerate `docs/rules/*.md`, the README's rule table and `torchlint/catalogue.py` from the rule classes:
`python -m torchlint.docs`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from torchlint.rules import all_rules

TABLE_START = "<!-- rules-table:start -->"
TABLE_END = "<!-- rules-table:end -->"


def rules_table() -> str:
    rows = ["| code | name | family | fix |", "|---|---|---|---|"]
    for rule in all_rules():
        name = rule.name + (" (opt-in)" if rule.opt_in else "") + (" (preview)" if rule.preview else "")
        rows.append(f"| [{rule.code}](docs/rules/{rule.code}.md) | {name} | {rule.family()} | {rule.fix_safety} |")
    return "\n".join(rows)


CATALOGUE_HEADER = '''"""Every rule's code, name, opt-in and preview flags: what configuration needs, readable without importing the rules.

Importing the rules imports libcst, about a third of a second; a run whose every file is
answered from the cache needs neither. Written by `python -m torchlint.docs` from the rule
classes and checked against them by tests/test_rules_catalogue.py: do not edit by hand.
"""

from typing import NamedTuple, Tuple


class RuleEntry(NamedTuple):
    code: str
    name: str
    opt_in: bool
    preview: bool


'''


def catalogue() -> str:
    rows = "".join(f'    RuleEntry("{rule.code}", "{rule.name}", {rule.opt_in}, {bool(rule.preview)}),\n' for rule in all_rules())
    return CATALOGUE_HEADER + "RULES: Tuple[RuleEntry, ...] = (\n" + rows + ")\n"


def main(codes=(), root: Path = Path(".")) -> int:
    """Write every rule page, the README table and the catalogue, or only the pages of `codes` when given."""
    pages = root / "docs" / "rules"
    pages.mkdir(parents=True, exist_ok=True)
    for rule in all_rules():
        if not codes or rule.code in codes:
            (pages / f"{rule.code}.md").write_text(rule.documentation(), encoding="utf-8")
    if codes:
        return 0
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.DOTALL)
    readme.write_text(pattern.sub(f"{TABLE_START}\n{rules_table()}\n{TABLE_END}", text), encoding="utf-8")
    (root / "torchlint" / "catalogue.py").write_text(catalogue(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
