"""What a constraint costs and why: the schema doctor, ideal pass counts, `cfsm check`
verdicts, the JSON prefix scanner and why a run hit its token limit."""
