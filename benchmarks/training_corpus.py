"""The training-code corpus: .py and .ipynb files of one recorded commit of public repositories full of PyTorch training code.

    python benchmarks/training_corpus.py                    # extract what is missing, print files and lines
    python benchmarks/training_corpus.py --path             # print only the corpus folder
    python benchmarks/training_corpus.py --mirror-root DIR  # look for the git mirrors in DIR
    python benchmarks/training_corpus.py openai/CLIP        # only these repositories
    python benchmarks/training_corpus.py --repos-file benchmarks/holdout-repos.txt --into benchmarks/.cache/holdout
                                                            # another list, in its own folder

Next to the pinned wheels of benchmarks/corpus.py (library code), this corpus holds user
code: beginner, tutorial, course and research scripts and notebooks, for precision and
recall work. `benchmarks/training-repos.txt` records, per repository, `owner/name` and the
40-hex sha of the commit used; every figure taken on this corpus can be reproduced from it.

The script never touches the network: the repositories are fetched as git mirrors by
whatever means you have; the script extracts the recorded commits. A mirror of
`owner/name` is looked for under `--mirror-root` (default /work/.mirror) as
`owner+name/repo/.git`, `owner+name/repo`, `owner+name.git` or `owner+name` (the first
two are how the mirrors there are laid out; a bare `git clone --mirror` fits the others).
Only the recorded commit's `.py` and `.ipynb` blobs, and the settings files torchlint reads for a
project (`pyproject.toml`, `setup.cfg`, `requirements*.txt`, `environment.yml`, CI workflows),
are written, files over 2 MB are
skipped, one folder per repository under `benchmarks/.cache/training/owner+name/`
(gitignored), with a `.complete` marker, holding the sha and the extraction's format, written
last. A folder whose marker names the recorded sha and the current format is skipped, so a second run reads no git object; a
repository with neither a complete folder nor a mirror holding its commit is reported
as missing (exit status 1). Lint the folder with `--no-respect-gitignore`, since the
cache folder is gitignored. Needs only the standard library and `git`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
CORPUS = CACHE / "training"
REPOS_FILE = HERE / "training-repos.txt"
MIRROR_ROOT = Path("/work/.mirror")
# Written last into a repository's folder, holding the sha: a folder without it is an interrupted extraction.
COMPLETE = ".complete"
SUFFIXES = (".py", ".ipynb")
# Besides the code, the files torchlint reads for a project's settings: its torch requirement
# (torchlint/project_settings.py) and the CI that TL205's project intent reads. Without them a
# repository's code is judged as that of a project requiring nothing (round 49: a library
# requiring torch>=1.7 had its `torch.svd` calls reported for a replacement of 1.8).
SETTINGS_NAMES = ("pyproject.toml", "setup.cfg", "settings.ini", "environment.yml", "environment.yaml")
_REQUIREMENTS = re.compile(r"requirements[^/]*\.txt")
_WORKFLOW = re.compile(r"\.github/workflows/[^/]+\.ya?ml")
# What an extraction holds, written into its marker: a folder extracted to an older format is extracted again.
FORMAT = "code-and-settings"
MAX_BYTES = 2 * 1024 * 1024

_LINE = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)\s+(?P<sha>[0-9a-f]{40})\s*$")
# A repository of the list that could not be had: `# owner/name skipped: why`.
_SKIPPED = re.compile(r"^#\s*(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*)\s+skipped:\s*(?P<why>.*)$")


@dataclass(frozen=True)
class Repo:
    name: str  # owner/name
    sha: str
    root: Path = CORPUS  # the folder holding one folder per repository

    @property
    def slug(self) -> str:
        return self.name.replace("/", "+")

    @property
    def folder(self) -> Path:
        return self.root / self.slug

    def is_complete(self) -> bool:
        return self._marker()[:2] == [self.sha, FORMAT]

    def has_code_only(self) -> bool:
        """Extracted at its sha before the settings files were kept (a marker holding the sha alone)."""
        marker = self._marker()
        return marker[:1] == [self.sha] and marker[1:2] != [FORMAT]

    def _marker(self) -> List[str]:
        marker = self.folder / COMPLETE
        return marker.read_text().split() if marker.is_file() else []


def read_repos(path: Path = REPOS_FILE, root: Path = CORPUS) -> List[Repo]:
    """`owner/name <sha>` lines; blank lines and `#` comments (skipped repositories) are ignored."""
    repos = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise SystemExit(f"{path}:{number}: expected 'owner/name <40-hex sha>', got {raw!r}")
        repos.append(Repo(match["repo"], match["sha"], root))
    return repos


def skipped_repos(path: Path = REPOS_FILE) -> List[Tuple[str, str]]:
    """(owner/name, why) of the `# owner/name skipped: why` comment lines."""
    found = []
    for raw in path.read_text().splitlines():
        match = _SKIPPED.match(raw.strip())
        if match is not None:
            found.append((match["repo"], match["why"]))
    return found


def by_name(repos: Sequence[Repo], names: Sequence[str]) -> List[Repo]:
    known = {repo.name.lower(): repo for repo in repos}
    unknown = [name for name in names if name.lower() not in known]
    if unknown:
        raise SystemExit(f"unknown training repository(ies): {', '.join(unknown)}; see {REPOS_FILE}")
    return [known[name.lower()] for name in names]


def _git(git_dir: Path, *args: str, stdin: Optional[bytes] = None) -> bytes:
    result = subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} in {git_dir}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def find_mirror(repo: Repo, root: Path) -> Optional[Path]:
    """The git directory of `repo` under `root` that holds its recorded commit, if any."""
    if not root.is_dir():
        return None
    slug = repo.slug.lower()
    for entry in sorted(root.iterdir()):  # owner/name are case-insensitive on GitHub
        base = entry.name[:-4] if entry.name.endswith(".git") else entry.name
        if base.lower() != slug:
            continue
        for candidate in (entry / "repo" / ".git", entry / "repo", entry / ".git", entry):
            if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
                try:
                    _git(candidate, "cat-file", "-e", repo.sha + "^{commit}")
                except RuntimeError:
                    continue
                return candidate
    return None


def _safe(path: str) -> bool:
    parts = path.split("/")
    return not path.startswith("/") and ".." not in parts and "" not in parts and ".git" not in parts


def _wanted(path: str) -> bool:
    """The code (`.py`, `.ipynb`) and the project settings files (`SETTINGS_NAMES`, requirements, CI workflows)."""
    name = path.rpartition("/")[2]
    return (
        path.endswith(SUFFIXES) or name in SETTINGS_NAMES or _REQUIREMENTS.fullmatch(name) is not None
        or _WORKFLOW.fullmatch(path) is not None
    )


def extract(repo: Repo, git_dir: Path) -> Tuple[int, List[str]]:
    """Write the recorded commit's code and settings blobs (`_wanted`) into the repo's folder; return (files written,
    skipped notes)."""
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", repo.sha)
    wanted: List[Tuple[str, str]] = []  # (oid, path)
    skipped: List[str] = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        path = raw_path.decode("utf-8", errors="surrogateescape")
        if kind != "blob" or not _wanted(path):
            continue
        if mode not in ("100644", "100755"):  # symbolic links
            skipped.append(f"{path} (mode {mode})")
        elif not _safe(path):
            skipped.append(f"{path} (unsafe path)")
        else:
            wanted.append((oid, path))
    sizes = _git(git_dir, "cat-file", "--batch-check", stdin="".join(oid + "\n" for oid, _ in wanted).encode())
    readable: List[Tuple[str, str]] = []
    for (oid, path), line in zip(wanted, sizes.decode().splitlines()):
        fields = line.split()
        if fields[-1] == "missing":  # mirrors may lack their largest blobs
            skipped.append(f"{path} (blob missing from the mirror)")
        elif int(fields[2]) > MAX_BYTES:
            skipped.append(f"{path} ({int(fields[2])} bytes)")
        else:
            readable.append((oid, path))
    staging = repo.folder.with_name(repo.folder.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    contents = _git(git_dir, "cat-file", "--batch", stdin="".join(oid + "\n" for oid, _ in readable).encode())
    offset = 0
    for oid, path in readable:
        header_end = contents.index(b"\n", offset)
        size = int(contents[offset:header_end].split()[2])
        start = header_end + 1
        target = staging / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(contents[start:start + size])
        offset = start + size + 1  # the blob is followed by a newline
    (staging / COMPLETE).write_text(f"{repo.sha} {FORMAT}\n" + "".join(f"skipped {note}\n" for note in skipped))
    shutil.rmtree(repo.folder, ignore_errors=True)
    staging.rename(repo.folder)
    return len(readable), skipped


def ensure(repos: Sequence[Repo], mirror_root: Path = MIRROR_ROOT, verbose: bool = True) -> List[Tuple[Repo, str]]:
    """Extract every repository not extracted at its recorded sha yet; return (repo, why) for those missing."""
    missing = []
    for repo in repos:
        if repo.is_complete():
            continue
        git_dir = find_mirror(repo, mirror_root)
        if git_dir is None and repo.has_code_only():
            # An older extraction, its settings files missing, is still the commit's code: kept, and said.
            if verbose:
                print(f"{repo.name}: extracted without its settings files, and no mirror to add them", file=sys.stderr)
            continue
        if git_dir is None:
            missing.append((repo, f"no complete folder, and no git mirror holding {repo.sha[:12]} under {mirror_root}"))
            continue
        written, skipped = extract(repo, git_dir)
        if verbose:
            note = f"extracted {repo.name}@{repo.sha[:12]} from {git_dir}: {written} files, {len(skipped)} skipped"
            print(note, file=sys.stderr)
            for note in skipped:
                print(f"    skipped {note}", file=sys.stderr)
    return missing


def source_files(folder: Path) -> Dict[str, List[Path]]:
    found: Dict[str, List[Path]] = {suffix: [] for suffix in SUFFIXES}
    for directory, subfolders, names in os.walk(folder):
        subfolders.sort()
        for name in sorted(names):
            for suffix in SUFFIXES:
                if name.endswith(suffix):
                    found[suffix].append(Path(directory, name))
    return found


def count_lines(paths: Sequence[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as handle:
            data = handle.read()
        total += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return total


def notebook_code_lines(paths: Sequence[Path]) -> Tuple[int, int]:
    """(lines in code cells, notebooks that are not readable JSON notebooks)."""
    total = unreadable = 0
    for path in paths:
        try:
            with open(path, "rb") as handle:
                cells = json.load(handle)["cells"]
            for cell in cells:
                if cell.get("cell_type") == "code":
                    source = cell.get("source", "")
                    text = "".join(source) if isinstance(source, list) else source
                    total += len(text.splitlines())
        except (ValueError, KeyError, TypeError, AttributeError):
            unreadable += 1
    return total, unreadable


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="store_true", help="print only the corpus folder")
    parser.add_argument("--mirror-root", type=Path, default=MIRROR_ROOT, metavar="DIR",
                        help=f"where the git mirrors are (default {MIRROR_ROOT})")
    parser.add_argument("--repos-file", type=Path, default=REPOS_FILE, metavar="FILE",
                        help="the recorded repositories and shas (default benchmarks/training-repos.txt)")
    parser.add_argument("--into", type=Path, default=CORPUS, metavar="DIR",
                        help=f"the folder to extract into (default {CORPUS}); keep another list out of the corpus folder")
    parser.add_argument("repos", nargs="*", help="only these owner/name repositories (default: all)")
    args = parser.parse_args(argv)
    recorded = read_repos(args.repos_file, args.into.resolve())
    repos = by_name(recorded, args.repos) if args.repos else recorded
    missing = ensure(repos, args.mirror_root)
    if args.path:
        print(args.into.resolve())
        return 1 if missing else 0
    absent = {repo for repo, _ in missing}
    header = f"{'repository':<48} {'.py':>6} {'lines':>9} {'.ipynb':>7} {'raw lines':>10} {'code lines':>11}"
    print(header)
    totals = [0] * 5
    unreadable_total = 0
    for repo in repos:
        if repo in absent:
            continue
        found = source_files(repo.folder)
        py, nb = found[".py"], found[".ipynb"]
        code, unreadable = notebook_code_lines(nb)
        unreadable_total += unreadable
        row = [len(py), count_lines(py), len(nb), count_lines(nb), code]
        totals = [a + b for a, b in zip(totals, row)]
        print(f"{repo.name:<48} {row[0]:>6} {row[1]:>9} {row[2]:>7} {row[3]:>10} {row[4]:>11}")
    label = f"total ({len(repos) - len(absent)} repos)"
    print(f"{label:<48} {totals[0]:>6} {totals[1]:>9} {totals[2]:>7} {totals[3]:>10} {totals[4]:>11}   in {args.into.resolve()}")
    if unreadable_total:
        print(f"{unreadable_total} .ipynb file(s) are not readable JSON notebooks (counted 0 code lines)")
    if not args.repos:
        for name, why in skipped_repos(args.repos_file):
            print(f"not recorded: {name}: {why}")
    for repo, why in missing:
        print(f"missing: {repo.name}: {why}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
