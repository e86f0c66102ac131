"""The real-code corpus: Python sources of pinned wheels of packages full of PyTorch code.

    python benchmarks/corpus.py            # download what is missing, print files and lines
    python benchmarks/corpus.py --path     # print only the corpus folder

Wheels are fetched with pip from the package registry into `benchmarks/.cache/wheels/`
(gitignored) and only their `.py` files are unpacked, one folder per package, under
`benchmarks/.cache/corpus/`. Packages already unpacked are skipped, so a second run
reads nothing from the network. The precision review (docs/precision.md), the
benchmark (benchmarks/run.py) and the TorchFix comparison all lint this folder; lint
it with `--no-respect-gitignore`, since the cache folder is gitignored.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

CACHE = Path(__file__).resolve().parent / ".cache"
WHEELS = CACHE / "wheels"
CORPUS = CACHE / "corpus"
# Written last into a package's folder: a folder without it is an interrupted unpack.
COMPLETE = ".complete"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    # Binary wheels differ per platform but ship the same .py files: always take this one.
    platform: Tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return CORPUS / f"{self.name}-{self.version}"


_LINUX_CP311 = ("--platform", "manylinux1_x86_64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311")

PACKAGES: Tuple[Package, ...] = (
    Package("transformers", "4.46.3"),
    Package("diffusers", "0.31.0"),
    Package("monai", "1.4.0"),
    Package("timm", "1.0.11"),
    Package("torchmetrics", "1.6.0"),
    Package("torchvision", "0.20.1", _LINUX_CP311),
    Package("pytorch-lightning", "2.4.0"),
    Package("pytorch-ignite", "0.5.1"),
    Package("opacus", "1.5.2"),
    Package("accelerate", "1.1.1"),
)


def by_name(names: Sequence[str]) -> List[Package]:
    known = {package.name: package for package in PACKAGES}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown corpus package(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[name] for name in names]


def _wheel_of(package: Package) -> Path:
    prefix = package.name.replace("-", "_").lower() + "-" + package.version + "-"
    for wheel in WHEELS.glob("*.whl"):
        if wheel.name.lower().startswith(prefix):
            return wheel
    WHEELS.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--dest", str(WHEELS), *package.platform, f"{package.name}=={package.version}",
    ]
    subprocess.run(command, check=True)
    for wheel in WHEELS.glob("*.whl"):
        if wheel.name.lower().startswith(prefix):
            return wheel
    raise SystemExit(f"pip downloaded no wheel for {package.name}=={package.version}")


def _unpack(wheel: Path, folder: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            name = member.filename
            # Sources only; a member that would land outside the folder is skipped.
            if not name.endswith(".py") or name.startswith("/") or ".." in name.split("/"):
                continue
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))


def ensure(packages: Sequence[Package] = PACKAGES) -> Path:
    """Download and unpack every package not unpacked yet; return the corpus folder."""
    for package in packages:
        if (package.folder / COMPLETE).exists():
            continue
        wheel = _wheel_of(package)
        package.folder.mkdir(parents=True, exist_ok=True)
        _unpack(wheel, package.folder)
        (package.folder / COMPLETE).write_text(wheel.name + "\n")
    return CORPUS


def python_files(folder: Path) -> List[Path]:
    found = []
    for directory, subfolders, names in os.walk(folder):
        subfolders.sort()
        found.extend(Path(directory, name) for name in sorted(names) if name.endswith(".py"))
    return found


def count_lines(paths: Sequence[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as handle:
            total += handle.read().count(b"\n")
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="store_true", help="print only the corpus folder")
    parser.add_argument("packages", nargs="*", help="only these packages (default: all)")
    args = parser.parse_args(argv)
    packages = by_name(args.packages) if args.packages else list(PACKAGES)
    ensure(packages)
    if args.path:
        print(CORPUS)
        return 0
    total_files = total_lines = 0
    for package in packages:
        files = python_files(package.folder)
        lines = count_lines(files)
        total_files += len(files)
        total_lines += lines
        print(f"{package.name + '==' + package.version:<28} {len(files):>6} files {lines:>9} lines")
    print(f"{'total':<28} {total_files:>6} files {total_lines:>9} lines   in {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
