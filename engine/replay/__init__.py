"""Replay: another engine's output (an OpenAI-compatible server's response, with its
logprobs) walked through this lab's automaton and masks, as a trace the step view draws."""
