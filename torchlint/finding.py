"""What a rule found: plain data, kept apart from how reporters show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from torchlint import PROJECT_URLS
from torchlint import source as sources


def project_url(label: str) -> Optional[str]:
    """A URL of the project by its label in `[project.urls]` (`Repository`, `Documentation`); None for another."""
    url = PROJECT_URLS.get(label)
    return url.rstrip("/") if url else None


def documentation_url(page: str) -> str:
    """The URL of a page of docs/ (`rules/TL101.md`, `health.md#codes`)."""
    return f"{project_url('Documentation')}/{page}"


# The rule pages' URL, with `{code}` to fill in.
DOCS_URL = documentation_url("rules/{code}.md")


@dataclass(frozen=True, order=True)
class Location:
    """A 1-based row and a 1-based column counted in characters."""

    row: int
    column: int

    def as_json(self) -> dict:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class Edit:
    """Replace the text from `location` up to (not including) `end_location` by `content`."""

    content: str
    location: Location
    end_location: Location
    # In a notebook: the code cell the locations count in, which may be another than the finding's (an import a
    # fix adds goes to the first cell). None in a script.
    cell: Optional[int] = None

    def as_json(self) -> dict:
        found = {
            "content": self.content,
            "location": self.location.as_json(),
            "end_location": self.end_location.as_json(),
        }
        if self.cell is not None:
            found["cell"] = self.cell
        return found


@dataclass(frozen=True)
class Fix:
    applicability: str  # "safe" or "unsafe"
    message: str
    edits: Tuple[Edit, ...]

    @classmethod
    def safe(cls, message: str, *edits: Edit) -> "Fix":
        return cls("safe", message, tuple(edits))

    @classmethod
    def unsafe(cls, message: str, *edits: Edit) -> "Fix":
        return cls("unsafe", message, tuple(edits))

    def as_json(self) -> dict:
        return {
            "applicability": self.applicability,
            "message": self.message,
            "edits": [edit.as_json() for edit in self.edits],
        }


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    filename: str
    location: Location
    end_location: Location
    fix: Optional[Fix] = None
    # Notebook cell (1-based) the location refers to; None for plain source files.
    cell: Optional[int] = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def url(self) -> str:
        return documentation_url(f"rules/{self.code}.md")

    def sort_key(self) -> tuple:
        return (self.filename, self.cell or 0, self.location, self.code, self.end_location)

    def as_json(self) -> dict:
        data = {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "filename": self.filename,
            "location": self.location.as_json(),
            "end_location": self.end_location.as_json(),
            "fix": self.fix.as_json() if self.fix else None,
            "url": self.url,
        }
        if self.cell is not None:
            data["cell"] = self.cell
        data.update(self.extra)
        return data


@dataclass
class FileResult:
    """What linting one file gave."""

    filename: str
    findings: List[Finding]
    # The decoded file, when it could be read: fixes are applied to it.
    source: Optional[sources.Source] = None
    # The project files the lint read through imports, with their digests (the cache checks them).
    dependencies: Tuple[Tuple[str, bytes], ...] = ()
