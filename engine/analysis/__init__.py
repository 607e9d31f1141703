"""What a constraint costs and why: the schema doctor, ideal pass counts, `cfsm check`
verdicts, the JSON prefix scanner, why a run hit its token limit, and which schema nodes
state no type (untyped.py)."""
