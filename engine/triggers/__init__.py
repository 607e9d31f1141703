"""Constraints that start on a trigger: reasoning first, then the constraint; tool calls
inside free text. plan.py says how a request becomes phases, matcher.py walks them,
segments.py checks each segment, tools.py reads OpenAI-style tools, tool_prompt.py writes
them into a prompt whose chat template ignores them, native.py hands a plan to a backend
that finds the triggers itself. (Import from the modules: this package's
`__init__` imports nothing, so the backends' trigger grammars can use plan.py without
importing the matcher, which uses the backends.)"""
