"""Findings as the client shows them: diagnostics, and the rule page on hover.

A diagnostic carries the finding's code, its rule name (in the message, which every
client shows), a link to the rule page (`codeDescription`, the URL every output
format gives), and its fix's safety in `data`. A file torchlint cannot read (TL000)
is an error; every finding of a rule is a warning, as ruff's editor integration
shows lint findings.
"""

from __future__ import annotations

import re
from typing import List, Optional

from lsprotocol import types

from torchlint.finding import DOCS_URL, Finding, Location
from torchlint.integrations.server.coordinates import Lines, Units
from torchlint.integrations.server.documents import Linted
from torchlint.rules import rules_by_code
from torchlint.rules.syntax.parse_error import ParseError

SOURCE = "torchlint"
_CODE = re.compile(r"\bTL\d{3}\b", re.IGNORECASE)


def diagnostic(finding: Finding, lines: Lines) -> types.Diagnostic:
    severity = types.DiagnosticSeverity.Error if finding.code == ParseError.code else types.DiagnosticSeverity.Warning
    return types.Diagnostic(
        range=lines.range(finding.location, finding.end_location),
        message=f"{finding.message} ({finding.name})",
        severity=severity,
        code=finding.code,
        code_description=types.CodeDescription(href=finding.url),
        source=SOURCE,
        data={"name": finding.name, "fix": finding.fix.applicability if finding.fix else None},
    )


def diagnostics(linted: Linted, units: Units) -> dict:
    """The diagnostics of each document of the lint (a notebook's: of each cell), empty lists included."""
    return {
        uri: [diagnostic(finding, linted.lines(uri, units)) for finding in findings]
        for uri, findings in linted.by_uri().items()
    }


def rule_page(code: str) -> Optional[str]:
    """The rule's page, as `torchlint rule CODE` prints it, with the link to its page on the web."""
    rule = rules_by_code().get(code.upper())
    if rule is None:
        return None
    return rule.documentation() + f"\n[{rule.code} on the web]({DOCS_URL.format(code=rule.code)})\n"


def covering(linted: Linted, uri: str, at: Location) -> List[Finding]:
    return [
        finding for finding in linted.findings
        if linted.snapshot.uri_of(finding) == uri and finding.location <= at <= finding.end_location
    ]


def hover(linted: Linted, uri: str, position: types.Position, units: Units) -> Optional[types.Hover]:
    """The pages of the rules reported where the cursor is, else of a code under it (`# noqa: TL101`)."""
    lines = linted.lines(uri, units)
    at = lines.location(position)
    codes = list(dict.fromkeys(finding.code for finding in covering(linted, uri, at)))
    if not codes:
        line = lines.lines[at.row - 1]
        codes = [match.group().upper() for match in _CODE.finditer(line) if match.start() < at.column <= match.end() + 1]
    pages = [page for page in map(rule_page, codes) if page]
    if not pages:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n---\n\n".join(pages)))
