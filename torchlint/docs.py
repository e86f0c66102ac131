"""Regenerate `docs/rules/*.md` and the README's rule table from the rule classes: `python -m torchlint.docs`."""

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
        name = rule.name + (" (opt-in)" if rule.opt_in else "")
        rows.append(f"| [{rule.code}](docs/rules/{rule.code}.md) | {name} | {rule.family()} | {rule.fix_safety} |")
    return "\n".join(rows)


def main(codes=(), root: Path = Path(".")) -> int:
    """Write every rule page and the README table, or only the pages of `codes` when given."""
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
