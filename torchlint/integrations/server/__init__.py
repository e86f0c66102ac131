"""`torchlint server`: the language server, over stdio, on pygls.

The editor sees what `torchlint check` reports, from the same engine and the same
config, and gets each finding's fix as a code action. The pieces:

- `command.py`: the `server` command; imports pygls only when it runs, so linting
  never needs the `server` extra.
- `coordinates.py`: rows and columns in characters (the engine's) to LSP positions
  in the client's code units (UTF-16 unless it asks for another), and text changes
  to text edits.
- `documents.py`: what an open document or notebook lints as, with which config,
  and the project files the lint read (a save of one re-lints the documents that
  import it).
- `actions.py`: code actions (a quick fix per finding, fix-all, `# noqa`) and hovers.
- `scheduler.py`: where lints run: a thread for documents of ordinary size, a worker
  process for large ones, so that no document holds another back.
- `jsonrpc.py`: reads the messages, answering each malformed one with its JSON-RPC
  error (pygls alone answers none).
- `server.py`: the protocol handlers, refreshes, exit.

Set-up for each editor: docs/editors.md.
"""
