"""torchlint: find silent PyTorch bugs before training, fix the safe ones, prove the rest."""

__version__ = "0.1.0"

# Where the project lives, as `[project.urls]` in pyproject.toml says (tests/test_project_urls.py keeps the two
# equal): rule and health-check URLs in reports, the SARIF log's informationUri and the language server's links.
# Written here rather than read from the installed package's metadata, which cost a JSON or SARIF run about 20 ms
# (importing `importlib.metadata` and finding the distribution on `sys.path`) and gave nothing from a checkout.
PROJECT_URLS = {
    "Repository": "https://github.com/torchlint/torchlint",
    "Documentation": "https://github.com/torchlint/torchlint/blob/main/docs",
}
