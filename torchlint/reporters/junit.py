"""The `junit` format: JUnit XML, the test report Jenkins, GitLab, Azure Pipelines and most CI servers read.

The shape of the Jenkins JUnit schema (junit-10.xsd): a `testsuites` root, one
`testsuite` per file with findings (`name`, `tests`, `failures`, `errors`), one
`testcase` per finding (`name`, `classname` = the file, `file`, `line`) holding a
`failure` whose `type` is the code and whose `message` is the finding's. A run without
findings is one suite with one passing test case, so that a CI server shows a pass
instead of an empty report. Characters XML 1.0 cannot hold (control characters, a
file name's undecodable bytes) become U+FFFD.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import groupby
from typing import TYPE_CHECKING, List, Mapping

from torchlint.finding import Finding

if TYPE_CHECKING:
    import xml.etree.ElementTree as ElementTree

@lru_cache(maxsize=None)
def _not_xml() -> "re.Pattern[str]":
    # Compiled on first use: a class of these ranges takes re several milliseconds, paid by every run otherwise.
    return re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: object) -> str:
    return _not_xml().sub("\ufffd", str(value))


def _element(parent: "ElementTree.Element", tag: str, **attributes: object) -> "ElementTree.Element":
    from xml.etree.ElementTree import SubElement

    return SubElement(parent, tag, {key: _text(value) for key, value in attributes.items()})


def _place(finding: Finding) -> str:
    place = f"{finding.location.row}:{finding.location.column}"
    return f"cell {finding.cell}:{place}" if finding.cell is not None else place


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    # Imported here: every run loads the reporters, few write XML.
    import xml.etree.ElementTree as ElementTree

    root = ElementTree.Element("testsuites", {"name": "torchlint", "tests": str(max(len(findings), 1)),
                                              "failures": str(len(findings)), "errors": "0"})
    if not findings:
        suite = _element(root, "testsuite", name="torchlint", tests=1, failures=0, errors=0)
        _element(suite, "testcase", name="no findings", classname="torchlint")
    for filename, group in groupby(findings, key=lambda finding: finding.filename):
        in_file = list(group)
        suite = _element(root, "testsuite", name=filename, tests=len(in_file), failures=len(in_file), errors=0)
        for finding in in_file:
            place = _place(finding)
            case = {"name": f"{finding.code} ({finding.name}) at {place}", "classname": filename, "file": filename}
            if finding.cell is None:
                case["line"] = finding.location.row
            failure = _element(_element(suite, "testcase", **case), "failure", type=finding.code, message=finding.message)
            failure.text = _text(f"{filename}:{place}: {finding.code} {finding.message}")
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
