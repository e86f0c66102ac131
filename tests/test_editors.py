"""The editor set-ups of docs/editors.md, run in the editors: each snippet marked
`<!-- run: NAME -->` there is read from the page and run here, in the editor
installed on this machine (a test is skipped when its editor is not installed).

Each editor is driven headless through what a user does: open a buggy training
script, wait for its diagnostics, apply the quick fix of the finding under the
cursor, then "fix all safe fixes"; what it saw is written to a results file. The
diagnostics must be the findings `torchlint check` reports, and the text after
fix-all what `torchlint check --fix` makes of the same text. The waits are
generous timeouts that only catch a hang; nothing here measures speed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

ROOT = Path(__file__).resolve().parent.parent
EDITORS_PAGE = ROOT / "docs" / "editors.md"
EXAMPLE = ROOT / "fixtures" / "examples" / "train.py"
# A finding with a safe quick fix, on the script's last line.
TYPO = "weights = torch.zeros(3)\nweights.require_grad = True\n"
EDITOR_SECONDS = 180

pytestmark = pytest.mark.skipif(shutil.which("torchlint") is None and not (Path(sys.executable).parent / "torchlint").exists(),
                                reason="the torchlint command is not installed")


def snippet(name: str) -> str:
    """The code block that follows `<!-- run: NAME -->` in docs/editors.md."""
    page = EDITORS_PAGE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- run: {re.escape(name)} -->\s*```\w*\n(.*?)```", page, re.DOTALL)
    assert found, f"docs/editors.md has no snippet marked run: {name}"
    return found.group(1)


def script(folder: Path) -> Path:
    path = folder / "train.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8") + TYPO, encoding="utf-8")
    return path


def environment() -> Dict[str, str]:
    """The editor finds `torchlint` on PATH, as the page asks: the one next to this Python."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["HOME"] = env.get("HOME", "/tmp")
    return env


def check_codes(path: Path) -> List[str]:
    """`torchlint check`'s findings as CODE:ROW, sorted."""
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--output-format", "json", str(path)],
        capture_output=True, text=True, cwd=path.parent, timeout=EDITOR_SECONDS,
    )
    return sorted(f"{finding['code']}:{finding['location']['row']}" for finding in json.loads(completed.stdout))


def fixed_by_check(text: str, folder: Path) -> str:
    """What `torchlint check --fix` makes of `text`."""
    path = folder / "fixed_by_check.py"
    path.write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "torchlint", "check", "--fix", str(path)], capture_output=True, cwd=folder,
                   timeout=EDITOR_SECONDS)
    return path.read_text(encoding="utf-8")


def results(path: Path) -> List[List[str]]:
    return [line.split("\t", 1) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_the_editor_saw_what_check_reports(seen: List[List[str]], train: Path, folder: Path) -> None:
    assert not [value for key, value in seen if key == "error"], seen
    diagnostics = [value.split() for key, value in seen if key == "diagnostics"]
    rows = len(train.read_text().splitlines())
    assert diagnostics[0] == check_codes(train)
    assert f"TL603:{rows}" in diagnostics[0]
    quick_fixed = [value for key, value in seen if key == "quickfixed"]
    assert quick_fixed == ["weights.requires_grad = True"]
    assert diagnostics[1] == [code for code in diagnostics[0] if not code.startswith("TL603")]
    offered = [value for key, value in seen if key == "offered"]
    assert offered[0].startswith("Fix TL603: Rename to `requires_grad`")
    assert "torchlint: fix all safe fixes" in offered[1]
    after_quick_fix = train.read_text().replace("weights.require_grad", "weights.requires_grad")
    fixed = json.loads([value for key, value in seen if key == "fixed"][0])
    # Editors hold a buffer's lines without the file's final newline.
    assert fixed + "\n" == fixed_by_check(after_quick_fix, folder)
    assert fixed + "\n" != after_quick_fix


NEOVIM_DRIVER = r"""
local out = assert(io.open(vim.env.TORCHLINT_RESULTS, "w"))
local function put(key, value) out:write(key .. "\t" .. value .. "\n"); out:flush() end
local function codes()
  local found = {}
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local lsp = d.user_data and d.user_data.lsp or {}
    table.insert(found, tostring(d.code or lsp.code) .. ":" .. (d.lnum + 1))
  end
  table.sort(found)
  return table.concat(found, " ")
end
local function text() return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n") end
local function wait_for(check) return vim.wait(120000, check, 50) end
-- The user picks the first action offered (the menu's order: the finding's fix first).
vim.ui.select = function(items, opts, on_choice)
  local titles = {}
  for _, item in ipairs(items) do table.insert(titles, (item[2] or item.action or item).title) end
  put("offered", table.concat(titles, " | "))
  on_choice(items[1], 1)
end
local ok, err = pcall(function()
  local version = vim.version()
  put("version", version.major .. "." .. version.minor .. "." .. version.patch)
  assert(wait_for(function() return #vim.diagnostic.get(0) > 0 end), "no diagnostics")
  put("diagnostics", codes())
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  local before = text()
  FIX_AT_CURSOR
  assert(wait_for(function() return text() ~= before end), "the quick fix changed nothing")
  put("quickfixed", vim.api.nvim_buf_get_lines(0, -2, -1, false)[1])
  assert(wait_for(function() return not codes():find("TL603") end), "TL603 stayed")
  put("diagnostics", codes())
  before = text()
  FIX_ALL
  assert(wait_for(function() return text() ~= before end), "fix-all changed nothing")
  put("fixed", vim.fn.json_encode(text()))
end)
if not ok then put("error", tostring(err)) end
out:close()
vim.cmd("qa!")
"""


def neovim_version() -> tuple:
    first = subprocess.run(["nvim", "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    return tuple(int(part) for part in re.search(r"v(\d+)\.(\d+)\.(\d+)", first).groups())


@pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim is not installed")
def test_neovim_start_client_setup_gives_diagnostics_a_quick_fix_and_fix_all(tmp_path: Path):
    if neovim_version() >= (0, 11):
        pytest.skip("the start_client set-up is the one for Neovim 0.7-0.10")
    train = script(tmp_path)
    (tmp_path / "init.lua").write_text(snippet("neovim-0.7"), encoding="utf-8")
    fix_at_cursor, fix_all = snippet("neovim-0.7-fix").strip().splitlines()
    driver = NEOVIM_DRIVER.replace("FIX_AT_CURSOR", fix_at_cursor).replace("FIX_ALL", fix_all)
    (tmp_path / "driver.lua").write_text(driver, encoding="utf-8")
    found = tmp_path / "results.txt"
    subprocess.run(
        ["nvim", "--headless", "--clean", "-u", "init.lua", "-c", "luafile driver.lua", "train.py"],
        cwd=tmp_path, env={**environment(), "TORCHLINT_RESULTS": str(found)}, timeout=EDITOR_SECONDS,
        stdin=subprocess.DEVNULL, capture_output=True,
    )
    assert_the_editor_saw_what_check_reports(results(found), train, tmp_path)


EMACS_DRIVER = r"""
(require 'eglot)
(require 'json)
(defvar torchlint-results (getenv "TORCHLINT_RESULTS"))
(defun torchlint-put (key value)
  (append-to-file (concat key "\t" value "\n") nil torchlint-results))
(defun wait-for (check)
  (let ((deadline (+ (float-time) 120)))
    (while (and (not (funcall check)) (< (float-time) deadline))
      ;; What eglot's idle timer does after an edit (idle timers never fire in batch mode): send the change.
      (eglot--signal-textDocument/didChange)
      (accept-process-output nil 0.05))
    (funcall check)))
(defun codes ()
  (let ((found (mapcar (lambda (diag)
                         (format "%s:%d"
                                 (plist-get (cdr (assoc 'eglot-lsp-diag (flymake-diagnostic-data diag))) :code)
                                 (line-number-at-pos (flymake-diagnostic-beg diag))))
                       (flymake-diagnostics))))
    (mapconcat #'identity (sort found #'string<) " ")))
(advice-add 'eglot--read-execute-code-action :before
            (lambda (actions &rest _)
              (torchlint-put "offered" (mapconcat (lambda (action) (plist-get action :title)) actions " | "))))
(defun text () (buffer-substring-no-properties (point-min) (point-max)))
(condition-case err
    (progn
      (torchlint-put "version" (format "emacs %s %s" emacs-version (file-name-directory (locate-library "eglot"))))
      (find-file "train.py")
      (python-mode)
      ;; Only torchlint's diagnostics (python-mode's own flymake backend runs pyflakes when it is installed).
      (remove-hook 'flymake-diagnostic-functions #'python-flymake t)
      (apply #'eglot (eglot--guess-contact))
      (unless (wait-for #'flymake-diagnostics) (error "no diagnostics"))
      (torchlint-put "diagnostics" (codes))
      (goto-char (point-max))
      (forward-line -1)
      (let ((before (text)))
        ;; `M-x eglot-code-actions' from the keyboard (eglot asks in the minibuffer, not with a mouse menu);
        ;; the user takes the default, the preferred action.
        (cl-letf (((symbol-function 'completing-read) (lambda (prompt items &rest args) (nth 4 args))))
          (let ((last-nonmenu-event ?\r))
            (call-interactively #'eglot-code-actions)))
        (unless (wait-for (lambda () (not (equal (text) before)))) (error "the quick fix changed nothing")))
      (torchlint-put "quickfixed" (buffer-substring-no-properties (line-beginning-position) (line-end-position)))
      (unless (wait-for (lambda () (not (string-match-p "TL603" (codes))))) (error "TL603 stayed"))
      (torchlint-put "diagnostics" (codes))
      (let ((before (text)))
        (torchlint-fix-all)
        (unless (wait-for (lambda () (not (equal (text) before)))) (error "fix-all changed nothing")))
      (torchlint-put "fixed" (json-encode (string-trim-right (text) "\n"))))
  (error (torchlint-put "error" (format "%S" err))))
(kill-emacs 0)
"""


@pytest.mark.skipif(shutil.which("emacs") is None, reason="Emacs is not installed")
def test_emacs_eglot_setup_gives_diagnostics_a_quick_fix_and_fix_all(tmp_path: Path):
    probe = subprocess.run(["emacs", "--batch", "--eval", "(require 'eglot)"], capture_output=True, timeout=EDITOR_SECONDS)
    if probe.returncode != 0:
        pytest.skip("this Emacs has no eglot (built in from Emacs 29; Debian's elpa-eglot before)")
    train = script(tmp_path)
    (tmp_path / "init.el").write_text(snippet("emacs-eglot") + snippet("emacs-eglot-fix"), encoding="utf-8")
    (tmp_path / "driver.el").write_text(EMACS_DRIVER, encoding="utf-8")
    found = tmp_path / "results.txt"
    subprocess.run(
        ["emacs", "--batch", "-l", "init.el", "-l", "driver.el"],
        cwd=tmp_path, env={**environment(), "TORCHLINT_RESULTS": str(found)}, timeout=EDITOR_SECONDS,
        stdin=subprocess.DEVNULL, capture_output=True,
    )
    assert_the_editor_saw_what_check_reports(results(found), train, tmp_path)


def test_the_generic_client_script_prints_what_check_reports(tmp_path: Path):
    pytest.importorskip("pygls")
    train = script(tmp_path)
    (tmp_path / "client.py").write_text(snippet("generic-client"), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "client.py", "train.py"], cwd=tmp_path, env=environment(), capture_output=True, text=True,
        timeout=EDITOR_SECONDS,
    )
    printed = sorted(f"{line.split()[1]}:{line.split(':')[1]}" for line in completed.stdout.splitlines())
    assert printed == check_codes(train)
