"""Jupyter notebooks: lint the code cells as one script, report by cell, fix in place.

An adapter over the engine, like the flake8 plugin: the engine lints Python source
and knows nothing of notebooks; `engine/parallel.lint_file_bytes` sends a `.ipynb`
here.

The engine sees one script, of kind `FileKind.NOTEBOOK` (for the rules that depend
on how the code runs): each code cell in order, after a marker comment line, with
IPython syntax neutralised: a line magic (`%time f()`), a shell line
(`!pip install`), a help line (`torch.nn.Linear?`) and their assignments
(`files = !ls`) become a `pass` that keeps the line and its indentation; so does
a line magic written without its `%` (`pip install timm`, `matplotlib inline`),
which IPython's automagic (on by default) runs as one, when the word after it
cannot continue Python (a name that is not a keyword, a number, a string). A
cell magic whose body is Python (`%%time`) only loses its first line; any other
(`%%bash`, `%%writefile`) and a cell Python cannot compile on its own become
blank lines, so one bad cell hides nothing in the others, and the latter is
reported as a TL000 of its own cell.

A cell that writes a Python file (`%%writefile train.py`, `%%file`, `-a` to
append) is linted as that file, apart from the script: its body, from the cell's
second line, byte for byte as IPython writes it (no magics, no top-level
`await`), its kind (script, test, library) judged as a file of that name beside
the notebook (where Jupyter starts the kernel), its names none of the notebook's.
Its findings are placed in the cell like any other; a body that does not parse is
a TL000 of the cell, as the file would be. An appended body is a fragment of a
file: linted only if it parses on its own (else skipped, not reported), and
without fixes, which may assume they see the whole file (an import added at its
top). Any other target (`%%writefile config.yaml`) is not Python and not linted. Before that, a cell whose code lines all
start with the indent of its first one loses that indent, as IPython's
`leading_indent` runs it (IPython before 9.0.2 takes the first line's indent off
the lines that have it, 9.0.2 and later the indent common to all lines: the two
agree on such a cell); a cell whose lines do not all share it stays as written, and
its TL000, if it does not parse, says that an older IPython ran it. Rows of the
script map back to a cell (numbered from 1 over all cells, markdown included,
as editors count them) and a row within it, columns to the cell as written; a
`# noqa` works on its cell line as in a file.

Fixing runs the caller's text fixer on the same script and writes back only the
`source` of the cells whose code changed, in the notebook's own JSON layout,
a dedented cell indented again: every other byte of the file stays as it was.
"""

from __future__ import annotations

import ast
import bisect
import json
import keyword
import os
import re
import shlex
import warnings
from dataclasses import dataclass, field, replace
from json.decoder import scanstring
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Tuple, Union

from torchlint.analysis.file_kind import FileKind
from torchlint.engine.runner import lint_text, unreadable
from torchlint.finding import Edit, FileResult, Finding, Fix, Location
from torchlint.rules.syntax.parse_error import ParseError

if TYPE_CHECKING:
    from torchlint.config import Config

NOTEBOOK_SUFFIX = ".ipynb"
# The notebook format `fix_notebook` rewrites; findings in notebooks of other formats carry no fix.
REWRITTEN_FORMAT = 4

_CELL_MARK = "#%% torchlint cell {}"
_CELL_MARK_LINE = re.compile(r"#%% torchlint cell (\d+)")
_MAGIC_MARK = "pass  #%% torchlint magic {}"
_MAGIC_MARK_LINE = re.compile(r"[ \t]*pass  #%% torchlint magic (\d+)")

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_INDENT = re.compile(r"[ \t]*")
_CELL_MAGIC = re.compile(r"[ \t]*%%(\w+)")
# Cell magics that run their body as Python in the kernel.
_PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "python", "python3", "time", "timeit"})
_LINE_MAGIC = re.compile(r"[ \t]*(?:[%!]|[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*[%!])")
_HELP = re.compile(r"[ \t]*(?:\?{1,2}[\w.*]+|[\w.*]+\?{1,2})[ \t]*$")
# Line magics and shell aliases notebooks call without `%` (automagic), then what follows them on the line.
_AUTOMAGIC = re.compile(
    r"[ \t]*(?:pip|conda|mamba|cd|ls|ll|mkdir|rm|rmdir|cp|mv|cat|pwd|env|set_env|matplotlib|pylab|load_ext|"
    r"reload_ext|unload_ext|autoreload|aimport|run|time|timeit|prun|who|whos|history|config|reset|store|tensorboard)"
    r"[ \t]+([\w\"'.~/]+)"
)
_COMPILE_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
# `%%writefile [-a] NAME` and its alias `%%file`: the rest of the line is the magic's arguments.
_WRITEFILE = re.compile(r"[ \t]*%%(?:writefile|file)[ \t]+(.*)")
_APPEND_OPTIONS = frozenset({"-a", "--append"})


def _lines(text: str) -> List[str]:
    """Lines with their endings, broken where Python breaks them (not on form feeds)."""
    return _LINE.findall(text)


def _body(line: str) -> Tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body):]


# ---------------------------------------------------------------- the script


@dataclass
class _Written:
    """The Python file a `%%writefile` cell writes."""

    # As the magic names it.
    name: str
    append: bool
    # What the cell writes: its lines after the magic's.
    body: str


@dataclass
class _Cell:
    number: int
    source: str
    # What the engine lints for this cell: dedented, magics neutralised, ending with a newline unless empty.
    script: str
    # False for a cell magic whose body is another language.
    python: bool = True
    compiles: bool = True
    # The script row of the cell's first line.
    first_row: int = 0
    # The indent taken off the start of each of the `dedented` rows (counted from 1 in the cell).
    indent: str = ""
    dedented: FrozenSet[int] = frozenset()
    # Set for a cell that writes a `.py` file, which is linted on its own (`Part`).
    writes: Optional[_Written] = None

    @property
    def frozen(self) -> bool:
        """Linted as blank lines and never rewritten."""
        return not (self.python and self.compiles)

    def place(self, location: Location) -> Location:
        """A location in the cell's script as a location in the cell as written."""
        if location.row in self.dedented:
            return Location(location.row, location.column + len(self.indent))
        return location


@dataclass
class _Script:
    cells: List[_Cell]
    # Magic lines by the number in their `pass` stand-in.
    magics: Dict[int, str] = field(default_factory=dict)
    text: str = ""

    def locate(self, location: Location, cell: _Cell) -> Location:
        return cell.place(Location(max(location.row - cell.first_row + 1, 1), location.column))

    def cell_at(self, row: int) -> _Cell:
        index = bisect.bisect_right([cell.first_row for cell in self.cells], row) - 1
        return self.cells[max(index, 0)]


def _after(line: str, depth: int, quote: Optional[str]) -> Tuple[int, Optional[str], bool]:
    """Bracket depth, open string and backslash continuation once `line` is read."""
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\":
                index += 2
            elif line.startswith(quote, index):
                index += len(quote)
                quote = None
            else:
                index += 1
            continue
        if char == "#":
            return depth, None, False
        if char in "'\"":
            quote = line[index:index + 3] if line[index:index + 3] in ('"""', "'''") else char
            index += len(quote)
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        index += 1
    continued = line.rstrip("\r\n").endswith("\\")
    if quote in ("'", '"') and not continued:
        quote = None  # an unterminated one-line string: Python reports it
    return depth, quote, continued


def _dedent(source: str) -> Optional[Tuple[str, str, FrozenSet[int]]]:
    """The cell without the indent all its lines share, as IPython runs it; None when it has none.

    The indent is that of the first line with code (IPython drops blank lines
    first); whitespace-only lines may lack it and keep what they have, which
    changes nothing Python reads.
    """
    lines = _lines(source)
    first = next((line for line in lines if not line.isspace()), "")
    indent = _INDENT.match(first).group()
    if not indent or not all(line.startswith(indent) or line.isspace() for line in lines):
        return None
    dedented = frozenset(row for row, line in enumerate(lines, start=1) if not line.isspace())
    text = "".join(line[len(indent):] if row in dedented else line for row, line in enumerate(lines, start=1))
    return text, indent, dedented


def _indented(code: str, indent: str) -> str:
    """What `_dedent` turns into `code`: `indent` before each line that is not whitespace only."""
    return "".join(line if line.isspace() else indent + line for line in _lines(code))


def _neutralise(source: str, magics: Dict[int, str]) -> Optional[str]:
    """The cell as plain Python, or None when its body is not Python at all."""
    lines = _lines(source)
    cell_magic = _CELL_MAGIC.match(lines[0]) if lines else None
    if cell_magic and cell_magic.group(1) not in _PYTHON_CELL_MAGICS:
        return None
    out = []
    depth, quote, continued = 0, None, False
    magic_indent = None  # set while a magic continues over backslashed lines
    for index, line in enumerate(lines):
        body, ending = _body(line)
        # Only a line that starts a statement can be IPython syntax: `% b` inside brackets is a modulo.
        starts_statement = depth == 0 and quote is None and not continued
        is_magic = starts_statement and (
            (index == 0 and cell_magic is not None) or _LINE_MAGIC.match(body) is not None or _HELP.match(body) is not None
            or _is_automagic(body)
        )
        if magic_indent is not None or is_magic:
            if magic_indent is None:
                magic_indent = _INDENT.match(body).group()
            number = len(magics)
            magics[number] = body
            out.append(magic_indent + _MAGIC_MARK.format(number) + ending)
            if not body.endswith("\\"):
                magic_indent = None
            continue
        out.append(line)
        depth, quote, continued = _after(line, depth, quote)
    script = "".join(out)
    return script if not script or script.endswith(("\n", "\r")) else script + "\n"


def _is_automagic(body: str) -> bool:
    """`pip install timm`: a magic's name, then a word that cannot follow a name in Python (`cd /tmp` and `ls -l`
    are Python as well as magics, and are left to Python)."""
    found = _AUTOMAGIC.match(body)
    if found is None:
        return False
    word = found.group(1)
    return not word.startswith("/") and not keyword.iskeyword(word)


def _compiles(script: str, flags: int = _COMPILE_FLAGS) -> bool:
    try:
        compile(script, "<cell>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _build(code_cells: List[Tuple[int, str]]) -> _Script:
    script = _Script([])
    parts = []
    row = 1
    for number, source in code_cells:
        # Cheap test first: most cells start with unindented code.
        dedented = _dedent(source) if source[:1].isspace() else None
        code, indent, rows = dedented or (source, "", frozenset())
        neutral = _neutralise(code, script.magics)
        cell = _Cell(number, source, code if neutral is None else neutral, python=neutral is not None, indent=indent, dedented=rows)
        cell.compiles = cell.python and _compiles(cell.script)
        if neutral is None:
            cell.writes = _written(code)
        parts.append(_CELL_MARK.format(number) + "\n")
        cell.first_row = row + 1
        lines = _lines(cell.script)
        parts.append("\n" * len(lines) if cell.frozen else cell.script)
        row = cell.first_row + len(lines)
        script.cells.append(cell)
    script.text = "".join(parts)
    return script


def _written(code: str) -> Optional[_Written]:
    """The `.py` file a `%%writefile` cell writes; None for another cell magic, another kind of file, or arguments
    IPython refuses."""
    lines = _lines(code)
    found = _WRITEFILE.fullmatch(_body(lines[0])[0]) if lines else None
    if found is None:
        return None
    try:
        words = shlex.split(found.group(1))
    except ValueError:  # an unclosed quote
        return None
    names = [word for word in words if word not in _APPEND_OPTIONS]
    if len(names) != 1 or names[0].startswith("-") or not names[0].endswith(".py"):
        return None
    return _Written(names[0], len(names) < len(words), code[len(lines[0]):])


@dataclass(frozen=True)
class Part:
    """What `fix_notebook` hands its fixer with each text: the script of the notebook's cells, or the body of one cell
    that writes a `.py` file. Each is linted as what it is (`lint`), and holds the notebook findings of its cells."""

    # The cell that writes the file, and the file's name as the magic gives it; None for the script.
    cell: Optional[int] = None
    written: Optional[str] = None
    # For the script: the cells that write files, which are not part of it.
    written_cells: FrozenSet[int] = frozenset()

    def lint(self, text: str, filename: str, config: "Config", use_prefilter: bool = True) -> List[Finding]:
        """`text`'s findings, for the notebook `filename`; positions are the text's own."""
        if self.written is None:
            return lint_text(text, filename, config, use_prefilter=use_prefilter, file_kind=FileKind.NOTEBOOK)
        # The kernel starts in the notebook's folder, where a relative name lands (a `tests/` folder makes a test).
        kind_name = os.path.join(os.path.dirname(filename), self.written)
        return lint_text(text, filename, config, use_prefilter=use_prefilter, kind_name=kind_name)

    def holds(self, finding: Finding) -> bool:
        """`finding`, of the notebook, is one of this text's."""
        return finding.cell == self.cell if self.cell is not None else finding.cell not in self.written_cells


def _parts(script: _Script) -> List[Tuple[Part, Optional[_Cell]]]:
    """The script's part, then each written file's with its cell."""
    written = [cell for cell in script.cells if cell.writes is not None]
    parts: List[Tuple[Part, Optional[_Cell]]] = [(Part(written_cells=frozenset(cell.number for cell in written)), None)]
    return parts + [(Part(cell.number, cell.writes.name), cell) for cell in written]


def _written_script(cell: _Cell) -> _Script:
    """The written file as a script of the one cell, row 1 being the cell's row 2, so `_in_cell` places its findings."""
    return _Script([replace(cell, first_row=0)])


def _is_python(metadata: dict) -> bool:
    languages = [
        (metadata.get("language_info") or {}).get("name"),
        (metadata.get("kernelspec") or {}).get("language"),
    ]
    return all(not isinstance(language, str) or language.lower() == "python" for language in languages)


def _code_cells(cells: list) -> List[Tuple[int, str]]:
    found = []
    for number, cell in enumerate(cells, start=1):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            found.append((number, source if isinstance(source, str) else "".join(source)))
    return found


# ---------------------------------------------------------------- linting


def lint_notebook_bytes(data: bytes, filename: str, config: "Config", use_prefilter: bool = True) -> FileResult:
    try:
        import nbformat
    except ImportError:
        return unreadable(filename, config, "linting notebooks needs nbformat: pip install nbformat")
    try:
        with warnings.catch_warnings():
            # nbformat warns about the file's format (cells without ids, from nbformat 5.1 on), which it fixes
            # as it reads: nothing the user asked torchlint about.
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(data.decode("utf-8-sig"), as_version=4, capture_validation_error={})
        # nbformat reports a malformed structure without raising; reading it is where it shows.
        python = _is_python(notebook.get("metadata", {}))
        code_cells = _code_cells(notebook.get("cells", []))
    except Exception as error:  # nbformat raises many types for files that are not notebooks
        return unreadable(filename, config, f"not a notebook nbformat can read: {type(error).__name__}: {error}")
    if not python:
        return FileResult(filename, [])
    script = _build(code_cells)
    findings = []
    for part, cell in _parts(script):
        if cell is None:
            findings += [_in_cell(finding, script) for finding in part.lint(script.text, filename, config, use_prefilter)]
            continue
        body = cell.writes.body
        if cell.writes.append and not _compiles(body, ast.PyCF_ONLY_AST):
            continue  # a fragment of a file whose other parts are elsewhere: not Python on its own, and not wrong
        linted = part.lint(body, filename, config, use_prefilter)
        if cell.writes.append:
            linted = [replace(finding, fix=None) for finding in linted]
        findings += [_in_cell(finding, _written_script(cell)) for finding in linted]
    if notebook.get("metadata", {}).get("orig_nbformat", REWRITTEN_FORMAT) != REWRITTEN_FORMAT:
        # nbformat read an older format (3's worksheets and `input`s) as 4, and `fix_notebook` rewrites only what
        # is format 4 on disk: a fix announced here would never be applied.
        findings = [replace(finding, fix=None) for finding in findings]
    if ParseError.code in config.codes_for(filename):
        for cell in script.cells:
            if cell.python and not cell.compiles:
                only_parse_errors = lint_text(cell.script, filename, config, codes=frozenset({ParseError.code}))
                findings += [
                    replace(
                        error, message=error.message + _indent_note(cell), location=cell.place(error.location),
                        end_location=cell.place(error.end_location), cell=cell.number,
                    )
                    for error in only_parse_errors
                ]
    return FileResult(filename, sorted(findings, key=Finding.sort_key))


def _indent_note(cell: _Cell) -> str:
    """Why a cell whose first line is indented, and whose lines do not all share that indent, may have run once."""
    first = next((line for line in _lines(cell.source) if not line.isspace()), "")
    if cell.indent or not first[:1].isspace():
        return ""
    return (
        " (IPython before 9.0.2 ran such a cell: it took the first line's indent off every line that has it; 9.0.2 and"
        " later take off only the indent all lines share, and raise this error too)"
    )


def cell_sources(text: str) -> Dict[int, str]:
    """Each code cell's source as written, by the cell's number (as findings count cells); {} if it is no notebook.

    What the reporters quote under a notebook finding: its rows and columns count in its cell as written.
    """
    try:
        cells = json.loads(text).get("cells", [])
        return dict(_code_cells(cells)) if isinstance(cells, list) else {}
    except (ValueError, AttributeError, TypeError, RecursionError):
        return {}


class FilePositions:
    """Where a cell's rows and columns lie in the notebook file's own text, its JSON: what a SARIF region or a GitHub
    annotation points at, since neither can name a cell. Built from the raw text, as `_parse_json` locates each
    string of a cell's `source`, and each character of the strings through their escapes (`\\n`, `\\"`, `\\u00e9`)."""

    def __init__(self, text: str):
        self.text = text
        # cell number -> the raw index of each character of its source as written, then the raw index of its end.
        self._offsets: Dict[int, List[int]] = {}
        self._sources: Dict[int, str] = {}
        try:
            root, _ = _parse_json(text, 0)
            cells = root.children.get("cells") if isinstance(root.children, dict) else None
        except (ValueError, RecursionError):
            cells = None
        if cells is None or not isinstance(cells.children, list):
            return
        for number, cell in enumerate(cells.children, start=1):
            source = cell.children.get("source") if isinstance(cell.children, dict) else None
            if source is None:
                continue
            pieces = [source] if source.children is None else source.children
            if any(not text.startswith('"', piece.start) for piece in pieces):
                continue
            offsets: List[int] = []
            for piece in pieces:
                offsets += _string_offsets(text, piece)
            self._sources[number] = "".join(json.loads(text[piece.start:piece.end]) for piece in pieces)
            self._offsets[number] = offsets + [pieces[-1].end - 1 if pieces else 0]

    def locate(self, cell: int, location: Location) -> Optional[Location]:
        """`location` (row and column in `cell` as written) as a row and column of the file; None if it is not there."""
        offsets = self._offsets.get(cell)
        if offsets is None:
            return None
        lines = _lines(self._sources[cell])
        if not 0 < location.row <= len(lines) + 1:
            return None
        start = sum(len(line) for line in lines[:location.row - 1])
        line = lines[location.row - 1] if location.row <= len(lines) else ""
        index = start + min(location.column - 1, len(line.rstrip("\r\n")))
        raw = offsets[min(index, len(offsets) - 1)]
        line_start = self.text.rfind("\n", 0, raw) + 1
        return Location(self.text.count("\n", 0, raw) + 1, raw - line_start + 1)


def _string_offsets(text: str, node: _Node) -> List[int]:
    """The raw index in `text` of each character the JSON string at `node` decodes to (a surrogate pair is one)."""
    offsets = []
    index, end = node.start + 1, node.end - 1
    while index < end:
        offsets.append(index)
        if text[index] != "\\":
            index += 1
        elif text[index + 1] != "u":
            index += 2
        elif 0xD800 <= int(text[index + 2:index + 6], 16) < 0xDC00 and text.startswith("\\u", index + 6):
            index += 12
        else:
            index += 6
    return offsets


def _in_cell(finding: Finding, script: _Script) -> Finding:
    cell = script.cell_at(finding.location.row)
    fix = finding.fix
    if fix is not None:
        edits = tuple(_edit_in_cell(edit, script) for edit in fix.edits)
        fix = Fix(fix.applicability, fix.message, edits)
    return replace(
        finding,
        location=script.locate(finding.location, cell),
        end_location=script.locate(finding.end_location, cell),
        fix=fix,
        cell=cell.number,
    )


def _edit_in_cell(edit: Edit, script: _Script) -> Edit:
    """An edit of the cells' script as an edit of the cell it starts in."""
    cell = script.cell_at(edit.location.row)
    return Edit(
        _edit_content(edit, script, cell), script.locate(edit.location, cell), script.locate(edit.end_location, cell),
        cell.number,
    )


def _edit_content(edit: Edit, script: _Script, cell: _Cell) -> str:
    """An edit's text for the cell as written: the lines it starts take the cell's indent."""
    if not cell.indent or not any(char in edit.content for char in "\r\n"):
        return edit.content
    lines = _lines(edit.content)
    tail = "" if lines[-1].endswith(("\n", "\r")) else lines.pop()  # what the rest of the end row follows
    out = [lines[0]] + [line if line.isspace() else cell.indent + line for line in lines[1:]]
    if tail.strip() or script.locate(edit.end_location, cell).row in cell.dedented:
        tail = cell.indent + tail
    return "".join(out) + tail


# ---------------------------------------------------------------- fixing


def fix_notebook(data: bytes, fix_text: Callable[[str, Part], str]) -> bytes:
    """The notebook with `fix_text` applied to its code: the cells' script, then the body of each cell that writes a
    whole `.py` file, each with its `Part`; `data` itself when nothing changed or it cannot be rewritten."""
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8-sig")
        notebook = json.loads(text)
        tree, _ = _parse_json(text, 0)
        cell_nodes = tree.children["cells"].children
        if notebook.get("nbformat") != REWRITTEN_FORMAT or not _is_python(notebook.get("metadata", {})):
            return data
        code_cells = _code_cells(notebook["cells"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # not a notebook this can rewrite
        return data
    script = _build(code_cells)
    sources: Dict[int, str] = {}
    for part, written in _parts(script):
        if written is None:
            pieces = _split(fix_text(script.text, part), [cell.number for cell in script.cells])
            for cell in script.cells if pieces is not None else ():
                if not cell.frozen:
                    sources[cell.number] = _restore(pieces[cell.number], script.magics, cell)
        elif not written.writes.append:
            head = written.script[:len(written.script) - len(written.writes.body)]
            sources[written.number] = _reindented(head + fix_text(written.writes.body, part), written)
    replacements = []
    for cell in script.cells:
        source = sources.get(cell.number, cell.source)
        if source != cell.source:
            node = cell_nodes[cell.number - 1].children["source"]
            replacements.append((node, _source_json(source, node, text)))
    if not replacements:
        return data
    for node, new in sorted(replacements, key=lambda item: item[0].start, reverse=True):
        text = text[:node.start] + new + text[node.end:]
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def _split(text: str, numbers: List[int]) -> Optional[Dict[int, str]]:
    """Each cell's part of a fixed script; None if a fix moved or removed the cell markers."""
    order: List[int] = []
    parts: Dict[int, List[str]] = {}
    before: List[str] = []  # a fix that inserts at the very top lands in the first cell
    for line in _lines(text):
        mark = _CELL_MARK_LINE.fullmatch(line.rstrip("\r\n"))
        if mark:
            order.append(int(mark.group(1)))
            parts[order[-1]] = []
        else:
            (parts[order[-1]] if order else before).append(line)
    if order != numbers:
        return None
    if order:
        parts[order[0]] = before + parts[order[0]]
    return {number: "".join(lines) for number, lines in parts.items()}


def _restore(fixed: str, magics: Dict[int, str], cell: _Cell) -> str:
    """The cell's new source: its magics back, and its indent if it was dedented."""
    out = []
    for line in _lines(fixed):
        body, ending = _body(line)
        magic = _MAGIC_MARK_LINE.fullmatch(body)
        out.append(magics[int(magic.group(1))] + ending if magic and int(magic.group(1)) in magics else line)
    source = _reindented("".join(out), cell)
    if not cell.source.endswith(("\n", "\r")) and source.endswith("\n"):
        source = source[:-1]  # the newline the script added
    return source


def _reindented(source: str, cell: _Cell) -> str:
    """The cell's new source with its indent back if it was dedented (its old source if that cannot be)."""
    if cell.indent and source.strip():
        indented = _indented(source, cell.indent)
        dedented = _dedent(indented)
        if dedented is None or dedented[:2] != (source, cell.indent):
            return cell.source  # a fix indented the first code line: IPython would take off more than the indent
        source = indented
    return source


# ---------------------------------------------------------------- JSON positions


@dataclass
class _Node:
    """Where a JSON value lies in the text; objects and arrays keep their members' nodes."""

    start: int
    end: int
    children: Union[None, Dict[str, "_Node"], List["_Node"]] = None


_SPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")


def _skip(text: str, index: int, expected: Optional[str] = None) -> int:
    index = _SPACE.match(text, index).end()
    if expected is not None:
        if not text.startswith(expected, index):
            raise ValueError(f"expected {expected!r} at offset {index}")
        index += 1
    return index


def _parse_json(text: str, index: int) -> Tuple[_Node, int]:
    start = _skip(text, index)
    opener = text[start:start + 1]
    if opener == '"':
        _, end = scanstring(text, start + 1)
        return _Node(start, end), end
    if opener not in ("{", "["):
        match = _SCALAR.match(text, start)
        if not match:
            raise ValueError(f"not JSON at offset {start}")
        return _Node(start, match.end()), match.end()
    closer = "}" if opener == "{" else "]"
    node = _Node(start, start, {} if opener == "{" else [])
    index = _skip(text, start + 1)
    if text.startswith(closer, index):
        node.end = index + 1
        return node, node.end
    while True:
        if opener == "{":
            key, index = scanstring(text, _skip(text, index, '"'))
            node.children[key], index = _parse_json(text, _skip(text, index, ":"))
        else:
            child, index = _parse_json(text, index)
            node.children.append(child)
        index = _skip(text, index)
        if text.startswith(closer, index):
            node.end = index + 1
            return node, node.end
        index = _skip(text, index, ",")


def _source_json(source: str, node: _Node, text: str) -> str:
    """`source` as JSON in the layout of the value it replaces; lines that did not change keep their bytes."""
    ensure_ascii = text.isascii()
    if node.children is None:
        return json.dumps(source, ensure_ascii=ensure_ascii)
    lines = source.splitlines(keepends=True)  # how nbformat splits a source into its list
    if not lines:
        return "[]"
    kept = {json.loads(text[child.start:child.end]): text[child.start:child.end] for child in node.children}
    items = [kept.get(line) or json.dumps(line, ensure_ascii=ensure_ascii) for line in lines]
    if node.children:
        opening = text[node.start + 1:node.children[0].start]
        closing = text[node.children[-1].end:node.end - 1]
        between = text[node.children[0].end:node.children[1].start] if len(node.children) > 1 else "," + opening
    else:
        line_start = text.rfind("\n", 0, node.start) + 1
        indent = _INDENT.match(text, line_start).group()
        opening, closing = "\n" + indent + " ", "\n" + indent
        between = "," + opening
    return "[" + opening + between.join(items) + closing + "]"
