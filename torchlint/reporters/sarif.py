"""The `sarif` format: SARIF 2.1.0, as GitHub code scanning and SARIF viewers read it.

One run; the driver lists the rules the results refer to, each with its page
as help text and its URL. Paths are relative to `%SRCROOT%`, the folder the run
started in, so that the log means the same on every checkout; a path outside it
is an absolute file URI. Columns count code points, as torchlint's do, and end
positions are exclusive in both. Each result carries a fingerprint built from
its rule, file and line text (`reporters/fingerprints.py`), so an alert survives
edits elsewhere in the file.

A notebook finding's rows count within its cell, which SARIF cannot express: its
region is where that cell line lies in the notebook's JSON (`reporters/sources.InFile`),
and the message and the result's properties name the cell, row and column.

A code outside the rule catalogue (the health check's TL9xx, `torchlint doctor`)
gets its descriptor from its first finding: name, message and the finding's own
`url`. A finding's own `severity` (the health check's) sets its level.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Mapping
from urllib.parse import quote

from torchlint import __version__
from torchlint.finding import Finding, Location, documentation_url, project_url
from torchlint.reporters.fingerprints import fingerprints
from torchlint.reporters.sources import InFile

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
BASE_ID = "%SRCROOT%"
FINGERPRINT_KEY = "torchlint/v1"


# The rules are imported on use: they bring libcst, which a run answered from the cache does not need.
def _level(code: str) -> str:
    from torchlint.rules.syntax.parse_error import ParseError

    return "error" if code == ParseError.code else "warning"


def _result_level(finding: Finding) -> str:
    return finding.extra.get("severity", _level(finding.code))


def _rule_descriptor(code: str, first: Finding) -> dict:
    from torchlint.rules import rules_by_code

    rule = rules_by_code().get(code)
    if rule is None:
        return _descriptor_from_finding(first)
    return {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.name.replace("-", " ").capitalize()},
        "fullDescription": {"text": rule.message},
        "help": {"text": rule.documentation(), "markdown": rule.documentation()},
        "helpUri": documentation_url(f"rules/{code}.md"),
        "defaultConfiguration": {"level": _level(code)},
        "properties": {"tags": ["torchlint", rule.family()]},
    }


def _descriptor_from_finding(finding: Finding) -> dict:
    url = finding.extra.get("url")
    descriptor = {
        "id": finding.code,
        "name": finding.name,
        "shortDescription": {"text": finding.name.replace("-", " ").capitalize()},
        "fullDescription": {"text": finding.message},
        "help": {"text": f"{finding.message} (see {url})" if url else finding.message},
    }
    if url:
        descriptor["helpUri"] = url
    return {**descriptor, "defaultConfiguration": {"level": _result_level(finding)}, "properties": {"tags": ["torchlint"]}}


def _artifact_location(filename: str, base: str) -> dict:
    absolute = os.path.abspath(filename)
    try:
        relative = os.path.relpath(absolute, base)
    except ValueError:  # another drive, on Windows
        relative = os.pardir
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return {"uri": Path(absolute).as_uri()}
    return {"uri": quote(Path(relative).as_posix()), "uriBaseId": BASE_ID}


def _region(start: Location, end: Location) -> dict:
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}


def _fixes(finding: Finding, artifact: dict) -> list:
    if finding.fix is None or finding.cell is not None:
        return []
    replacements = [
        {"deletedRegion": _region(edit.location, edit.end_location), "insertedContent": {"text": edit.content}}
        for edit in finding.fix.edits
    ]
    return [{
        "description": {"text": f"{finding.fix.message} ({finding.fix.applicability} fix)"},
        "artifactChanges": [{"artifactLocation": artifact, "replacements": replacements}],
    }]


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    base = os.getcwd()
    first_of: Dict[str, Finding] = {}
    for finding in findings:
        first_of.setdefault(finding.code, finding)
    codes = sorted(first_of)
    rule_index = {code: index for index, code in enumerate(codes)}
    artifacts = [_artifact_location(finding.filename, base) for finding in findings]
    results = []
    in_file = InFile(sources)
    for finding, artifact, fingerprint in zip(findings, artifacts, fingerprints(findings, [a["uri"] for a in artifacts], sources)):
        physical: dict = {"artifactLocation": artifact}
        message = finding.message
        span = in_file.span(finding)
        if span is not None:
            physical["region"] = _region(*span)
        if finding.cell is not None:
            message = f"cell {finding.cell}:{finding.location.row}:{finding.location.column}: {message}"
        result = {
            "ruleId": finding.code,
            "ruleIndex": rule_index[finding.code],
            "level": _result_level(finding),
            "message": {"text": message},
            "locations": [{"physicalLocation": physical}],
            "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
        }
        fixes = _fixes(finding, artifact)
        if fixes:
            result["fixes"] = fixes
        if finding.cell is not None:
            result["properties"] = {"cell": finding.cell, "cellRow": finding.location.row, "cellColumn": finding.location.column}
        results.append(result)
    driver = {"name": "torchlint", "version": __version__, "semanticVersion": __version__}
    driver["informationUri"] = project_url("Repository")
    driver["rules"] = [_rule_descriptor(code, first_of[code]) for code in codes]
    log = {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "originalUriBaseIds": {BASE_ID: {"uri": Path(base).as_uri() + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"
