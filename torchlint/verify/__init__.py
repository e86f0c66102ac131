"""`torchlint verify`: prove each finding by running a small witness program with torch.

command.py  the CLI (`verify`, `rule --verify`)
run.py      findings -> witnesses -> verdicts
witness.py  the witness table; witnesses/ holds one module per rule family
site.py     the finding's code, its literal arguments, the allow-list
sandbox.py  isolated processes: temp folder, `python -I`, limits, kill on timeout
prelude.py  the helpers every witness program starts with
"""
