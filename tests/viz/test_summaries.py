"""Run summaries say what a user needs to know: skipped jumps are never silent, and the
model card names the tokenizer family."""

from made_traces import totals
from made_traces import trace as made_trace

from engine.decoding.trace import JumpSkip
from viz.summaries import model_card, skipped_jumps_line, summary_md, time_saved_line

TOTALS = {
    "output_tokens": 9,
    "forward_passes": 9,
    "wall_s": 1.0,
    "tokens_per_s": 9.0,
    "jumps": 0,
    "jumped_chars": 0,
    "finished": True,
    "reason": "complete",
    "jumps_skipped": 3,
}
SKIP = JumpSkip(
    step=4,
    string="<|im_start|>user",
    char_start=1,
    reason="the tokenizer writes a special or unknown token for this text",
)


def test_skipped_jumps_are_named_with_their_reason_in_the_summary():
    trace = made_trace(totals=TOTALS, valid=True, validation="ok", jump_skips=[SKIP])
    line = skipped_jumps_line(trace)
    assert line.startswith("3 jumps skipped: the tokenizer writes a special") and "step 4" in line
    assert "3 jumps skipped" in summary_md(trace)


def test_no_skip_no_line():
    trace = made_trace(totals={**TOTALS, "jumps_skipped": 0}, valid=True, validation="ok")
    assert skipped_jumps_line(trace) == "" and "skipped" not in summary_md(trace)


def test_model_card_names_architecture_tokenizer_and_runtime():
    card = model_card(
        {
            "name": "m",
            "architecture": "llama",
            "vocab_size": 32000,
            "eos_token_id": 2,
            "device": "cpu",
            "runtime": "transformers",
            "tokenizer": {
                "family": "SentencePiece BPE",
                "byte_fallback": True,
                "prefix_space": True,
                "prefix_space_by": "Prepend normalizer",
            },
        }
    )
    for part in (
        "llama",
        "vocab 32,000",
        "SentencePiece BPE",
        "byte fallback yes",
        "prefix space (Prepend normalizer; off for outputs)",
        "EOS 2",
        "transformers on `cpu`",
    ):
        assert part in card, part


def test_the_time_saved_line_says_when_the_prompt_was_shared_from_the_last_request():
    t = {"runtime": "llamacpp", "est_forward_ms": 600.0, "est_masked_ms": 1000.0}
    assert "40% of the time saved" in time_saved_line(totals(**t))
    assert "shared" not in time_saved_line(totals(**t))
    line = time_saved_line(totals(**t, prompt_tokens=53, prompt_cached_tokens=52))
    assert "52 of the prompt's 53 tokens were shared from the previous request" in line


def test_after_a_failed_run_the_results_left_say_they_are_the_previous_runs():
    from viz.summaries import previous_run_note

    request = {"constraint": {"kind": "regex", "text": "[a-z]{3,8}"}}
    prev = made_trace(request=request, totals={"output_tokens": 5})
    note = previous_run_note(prev)
    assert "This run failed" in note and "previous run's: regex `[a-z]{3,8}`, 5 tokens" in note
    assert previous_run_note(None) == ""  # nothing on the page to label
    one = made_trace(request=request, totals={"output_tokens": 1})
    assert previous_run_note(one).endswith("`[a-z]{3,8}`, 1 token.")


def test_the_summary_says_when_a_run_waited_for_kv_cells():
    from viz.summaries import kv_wait_line

    assert kv_wait_line(totals(kv_held_passes=0, recomputed_tokens=0)) == ""
    line = kv_wait_line(totals(kv_held_passes=3, recomputed_tokens=140))
    assert "waited 3 passes" in line and "140 tokens again" in line
