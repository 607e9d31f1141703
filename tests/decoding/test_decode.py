"""End-to-end decoding on the embedded model (loaded once per session)."""

import json
import re

import jsonschema
import pytest
import torch

from engine.backends import BACKENDS
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import Trace, validate_trace
from engine.errors import CfsmError

pytestmark = pytest.mark.model


def close(engine, a, b) -> bool:
    """Logits equal up to the precision the model runs in (float32 on CPU, half on GPUs)."""
    half = engine.ensure_model("transformers").lm.dtype in ("float16", "bfloat16")
    return torch.allclose(
        a.float(), b.float(), atol=0.15 if half else 2e-3, rtol=2e-2 if half else 1e-3
    )


def gen(engine, prompt, constraint=None, **kw):
    return engine.generate(GenerateRequest(prompt=prompt, constraint=constraint, **kw)).to_json()


def test_kv_reuse_after_crop_matches_fresh_prefill(hf_engine):
    from engine.runtimes.base import Feed

    dec = hf_engine.ensure_model("transformers")
    run = dec.runner
    ids = dec.prompt_ids("Name a colour.", raw=False)
    extra_old = dec.lm.tokenizer.encode("Blue is", add_special_tokens=False)
    extra_new = dec.lm.tokenizer.encode("Red and green", add_special_tokens=False)
    cache = run.new_cache()
    run.forward([Feed(cache, ids + extra_old)])
    run.crop(cache, len(ids))
    assert cache.get_seq_length() == len(ids)
    (reused,), _ = run.forward([Feed(cache, extra_new)])
    (fresh,), _ = run.forward([Feed(run.new_cache(), ids + extra_new)])
    assert close(hf_engine, reused, fresh)
    assert int(reused.argmax()) == int(fresh.argmax())


def test_stacked_batch_matches_single_passes(hf_engine):
    """Two requests of different lengths in one stacked pass give each its own logits."""
    from engine.runtimes.base import Feed

    dec = hf_engine.ensure_model("transformers")
    run = dec.runner
    a = dec.prompt_ids("Name a colour.", raw=False)
    b = dec.prompt_ids("Write a long sentence about the sea and the sky.", raw=False)
    ca, cb = run.new_cache(), run.new_cache()
    run.forward([Feed(ca, a)])
    run.forward([Feed(cb, b)])
    nxt_a, nxt_b = [dec.lm.tokenizer.encode(" Blue", add_special_tokens=False), [11]]
    rows, _ = run.forward([Feed(ca, nxt_a), Feed(cb, nxt_b)])
    (fa,), _ = run.forward([Feed(run.new_cache(), a + nxt_a)])
    (fb,), _ = run.forward([Feed(run.new_cache(), b + nxt_b)])
    assert ca.get_seq_length() == len(a) + len(nxt_a) and cb.get_seq_length() == len(b) + 1
    for got, want in ((rows[0], fa), (rows[1], fb)):
        assert close(hf_engine, got[-1], want[-1])


def test_a_stable_decode_group_reuses_its_stacked_cache_correctly(hf_engine):
    """Consecutive one-token passes of the same requests reuse the stacked cache; after one
    request's cache is cropped (a jump), the group is stacked anew; logits stay exact."""
    from engine.runtimes.base import Feed

    dec = hf_engine.ensure_model("transformers")
    run = dec.runner
    tok = dec.lm.tokenizer
    seqs = [
        dec.prompt_ids("Name a colour.", raw=False),
        dec.prompt_ids("Write about the sea and the sky.", raw=False),
    ]
    caches = [run.new_cache(), run.new_cache()]
    run.forward(
        [Feed(caches[0], seqs[0]), Feed(caches[1], seqs[1])]
    )  # prompts of different lengths
    built = run.stacks_built
    nxt = tok.encode(" the big blue whale swims", add_special_tokens=False)
    for t in nxt[:3]:
        rows, _ = run.forward([Feed(caches[0], [t]), Feed(caches[1], [t])])
        for s in seqs:
            s.append(t)
    assert run.stacks_built == built + 1  # stacked for the first one-token pass, then reused twice
    for got, s in zip(rows, seqs, strict=True):
        (want,), _ = run.forward([Feed(run.new_cache(), s)])
        assert close(hf_engine, got[-1], want[-1])
    run.crop(caches[0], len(seqs[0]) - 2)  # a jump crops one request's cache
    del seqs[0][-2:]
    rows, _ = run.forward([Feed(caches[0], [nxt[3]]), Feed(caches[1], [nxt[3]])])
    assert run.stacks_built == built + 2
    for got, s in zip(rows, seqs, strict=True):
        (want,), _ = run.forward([Feed(run.new_cache(), s + [nxt[3]])])
        assert close(hf_engine, got[-1], want[-1])


def test_model_self_check_passed_at_load(hf_engine):
    lm = hf_engine.ensure_model("transformers").lm
    assert lm.self_check["cache_arg"] in ("cache", "past_key_values")
    assert max(lm.self_check["max_logprob_diff"].values()) < (
        0.25 if lm.dtype in ("float16", "bfloat16") else 1e-2
    )


def test_character_regex_jump_vs_masked(engine, paper_bench, character_regex):
    c = Constraint("regex", character_regex)
    prompt = paper_bench["character"]["prompt_template"].format(name="Ron Weasley")
    masked = gen(engine, prompt, c, mode="masked", max_new_tokens=256)
    jump = gen(engine, prompt, c, mode="jump", max_new_tokens=256)
    for tr in (masked, jump):
        assert tr["totals"]["finished"], tr["totals"]
        assert re.fullmatch(character_regex, tr["text"]), tr["text"]
        file = json.loads(json.dumps(tr))  # the download: loads back typed, writes the same
        assert json.loads(json.dumps(Trace.from_json(validate_trace(file)).to_json())) == file
    assert masked["totals"]["jumps"] == 0
    assert jump["totals"]["jumps"] >= 5
    # jump-forward saves most forward passes
    assert jump["totals"]["forward_passes"] * 2 < masked["totals"]["forward_passes"]
    # and stays near the ideal of its own output
    assert jump["totals"]["forward_passes"] <= 1.25 * jump["ideal"]["ideal_forward_passes"] + 1
    # every jump re-tokenized only the output and prefilled in one pass
    for j in jump["jumps"]:
        assert j["string"]
        after = "".join(t[1] for t in j["tokens_after"])
        assert after.endswith(j["string"])
        assert "".join(t[1] for t in j["tokens_before"]) + j["string"] == after
    origins = {t["origin"] for t in jump["tokens"]}
    assert {"jump", "model"} <= origins
    first = jump["steps"][0]
    for key in (
        "char_state",
        "token_state",
        "allowed",
        "top_raw",
        "top_masked",
        "feasible_mass",
        "forward_ms",
        "mask_us",
    ):
        assert key in first
    assert 0 < first["feasible_mass"] <= 1
    assert len(first["top_raw"]) == 10


def test_boundary_back_off(engine, paper_bench, character_regex):
    c = Constraint("regex", character_regex)
    prompt = paper_bench["character"]["prompt_template"].format(name="Luna Lovegood")
    healed = gen(engine, prompt, c, mode="jump", healing_tokens=2, max_new_tokens=256)
    plain = gen(engine, prompt, c, mode="jump", healing_tokens=0, max_new_tokens=256)
    assert any(j["backed_off"] for j in healed["jumps"])
    assert not any(j["backed_off"] for j in plain["jumps"])
    for tr in (healed, plain):
        assert re.fullmatch(character_regex, tr["text"])
    # ` "` before a free name can be extended by tokens like ` "L`: the model re-decides it
    first = healed["jumps"][0]
    assert first["backed_off"][0][1] == ' "'
    verifying = [s for s in healed["steps"] if "verifies" in s]
    assert verifying and all(s["verifies"][1] == ' "' for s in verifying)
    # re-deciding costs no extra forward pass: its logits come from the jump's prefill
    steps = healed["steps"]
    for s in verifying:
        if s["verified"]:
            assert steps[s["index"] + 1]["forward_ms"] == 0.0
    assert healed["totals"]["forward_passes"] <= plain["totals"]["forward_passes"] + 1
    # the confirmed output is one consistent tokenization of the text
    assert "".join(t["text"] for t in healed["tokens"]) == healed["text"]


@pytest.mark.parametrize(
    "pattern, prompt",
    [
        (
            r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
            "When did the Apollo 11 mission land? Answer with a date.",
        ),
        (
            r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])",
            "Give an example IPv4 address.",
        ),
        (r"(北京|上海|广州)是一个(大|小)城市。", "用中文介绍一个城市。"),
        (r"The answer is (yes|no)\.", "Is the sky blue?"),
    ],
)
def test_regexes_end_to_end(engine, pattern, prompt):
    tr = gen(engine, prompt, Constraint("regex", pattern), mode="jump", max_new_tokens=40)
    assert tr["totals"]["finished"], tr["totals"]
    assert re.fullmatch(pattern, tr["text"]), tr["text"]


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "enum": ["Paris", "Berlin", "Tokyo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_schema_end_to_end_per_backend(engine, backend):
    c = Constraint("schema", json.dumps(PERSON), "spaced")
    tr = gen(
        engine,
        "Give a JSON record for an English teacher living in Tokyo.",
        c,
        mode="jump",
        backend=backend,
        max_new_tokens=60,
    )
    assert tr["totals"]["finished"], tr["totals"]
    doc = json.loads(tr["text"])
    jsonschema.validate(doc, PERSON)
    assert ", " in tr["text"] and ": " in tr["text"]  # the spaced policy holds for every backend


@pytest.mark.parametrize("ws", ["compact", "flexible"])
def test_whitespace_policies(engine, ws):
    c = Constraint("schema", json.dumps(PERSON), ws)
    tr = gen(engine, "Describe a person as JSON.", c, mode="jump", max_new_tokens=60)
    doc = json.loads(tr["text"])
    jsonschema.validate(doc, PERSON)
    assert re.fullmatch(engine.compile(c, "fsm").dfa.pattern, tr["text"])
    if ws == "compact":
        assert tr["text"] == json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def test_grammar_through_native_backends(engine):
    ebnf = 'root ::= "The colour is " ("red" | "green" | "blue") "."'
    tr = gen(
        engine,
        "Pick a colour.",
        Constraint("grammar", ebnf),
        mode="jump",
        backend="xgrammar",
        max_new_tokens=20,
    )
    assert re.fullmatch(r"The colour is (red|green|blue)\.", tr["text"])
    lark = 'start: "The colour is " COLOR "."\nCOLOR: "red" | "green" | "blue"'
    tr = gen(
        engine,
        "Pick a colour.",
        Constraint("grammar", lark),
        mode="masked",
        backend="llguidance",
        max_new_tokens=20,
    )
    assert re.fullmatch(r"The colour is (red|green|blue)\.", tr["text"])


def test_sampling_is_seeded(engine):
    c = Constraint("regex", r"[a-z]{3,12}")
    a = gen(
        engine,
        "Say a word.",
        c,
        mode="masked",
        temperature=1.0,
        top_p=0.9,
        seed=7,
        max_new_tokens=12,
    )
    b = gen(
        engine,
        "Say a word.",
        c,
        mode="masked",
        temperature=1.0,
        top_p=0.9,
        seed=7,
        max_new_tokens=12,
    )
    assert a["text"] == b["text"]
    assert re.fullmatch(r"[a-z]{3,12}", a["text"])


def test_free_mode_and_max_tokens(engine):
    tr = gen(engine, "Count to ten.", None, mode="free", max_new_tokens=5)
    assert tr["totals"]["output_tokens"] == 5
    assert tr["totals"]["reason"] == "max_new_tokens" and not tr["totals"]["finished"]


def test_max_new_tokens_holds_across_a_jump(engine):
    c = Constraint(
        "regex", r'\{"description": "a long fixed preamble that is forced", "n": [0-9]\}'
    )
    tr = gen(engine, "JSON please.", c, mode="jump", max_new_tokens=4)
    assert tr["totals"]["output_tokens"] == 4
    assert not tr["totals"]["finished"] and tr["totals"]["reason"] == "max_new_tokens"
    assert "".join(t["text"] for t in tr["tokens"]) == tr["text"]


def test_bad_requests(engine):
    with pytest.raises(CfsmError) as ei:
        gen(engine, "x", None, mode="jump")
    assert ei.value.kind == "invalid_input"
    with pytest.raises(CfsmError) as ei:
        gen(engine, "x" * 30000, Constraint("regex", "a"), mode="jump")
    assert ei.value.kind == "input_too_large"
    with pytest.raises(CfsmError) as ei:
        gen(engine, "x", Constraint("regex", "a"), mode="jump", backend="nope")
    assert ei.value.kind == "unknown_backend"


def test_every_output_is_validated_in_the_trace(engine):
    """The trace says whether the output satisfies the constraint, checked independently."""
    person = gen(
        engine,
        "Give a JSON record for an English teacher living in Tokyo.",
        Constraint("schema", json.dumps(PERSON), "spaced"),
        max_new_tokens=60,
    )
    assert person["valid"] is True and "valid against the schema" in person["validation"]
    jsonschema.validate(json.loads(person["text"]), PERSON)
    cut = gen(
        engine,
        "Describe a person as JSON.",
        Constraint("schema", json.dumps(PERSON)),
        max_new_tokens=5,
    )
    assert cut["valid"] is False and "not finished (max_new_tokens)" in cut["validation"]
    rx = gen(
        engine,
        "Is the sky blue?",
        Constraint("regex", r"The answer is (yes|no)\."),
        max_new_tokens=20,
    )
    assert rx["valid"] is True and re.fullmatch(r"The answer is (yes|no)\.", rx["text"])
    free = gen(engine, "Count to ten.", None, mode="free", max_new_tokens=5)
    assert free["valid"] is None


def test_validation_catches_what_the_constraint_forbids():
    """The validator is independent of the decoder: outputs a broken backend could produce
    are reported invalid, with the place and the reason."""
    from engine.decoding.validate import validate_output

    c = Constraint("schema", json.dumps(PERSON))
    ok, why = validate_output(c, '{"name":"Ann","age":151,"city":"Tokyo"}', True, "complete", None)
    assert ok is False and why.startswith("at /age:") and "151" in why
    ok, why = validate_output(c, '{"name":"Ann","age":', True, "complete", None)
    assert ok is False and why.startswith("not JSON")
    ok, _ = validate_output(Constraint("regex", "[0-9]{3}"), "12a", True, "eos", None)
    assert ok is False
    ok, _ = validate_output(Constraint("grammar", 'root ::= "a"'), "a", True, "complete", False)
    assert ok is False


def test_validation_reads_shorthand_classes_as_the_engine_does():
    """The engine spells \\w \\d \\s and their negations in ASCII for every backend; the
    validator must agree (Python's default is Unicode)."""
    from engine.decoding.validate import validate_output

    assert validate_output(Constraint("regex", r"a\Wb"), "aéb", True, "eos", None)[0] is True
    assert validate_output(Constraint("regex", r"\w+"), "é", True, "eos", None)[0] is False
    ok, why = validate_output(
        Constraint("schema", '{"type": "integer"}'), "1" * 5000, True, "eos", None
    )
    assert ok is False and why.startswith("not JSON")  # Python refuses integers this long


def test_an_empty_prompt_is_a_clear_error(engine):
    with pytest.raises(CfsmError) as ei:
        gen(engine, "", Constraint("regex", "(yes|no)"), mode="masked", raw_prompt=True)
    assert ei.value.kind == "invalid_input" and "empty" in ei.value.message


def test_the_ideal_counts_only_passes_a_run_needs(engine):
    """`(yes|no)`: one pass decides the answer and nothing may follow it, so the run takes
    one pass and the ideal is one (it once said two); a date's ideal never exceeds what the
    run took."""
    tr = gen(engine, "Is water wet?", Constraint("regex", "(yes|no)"), mode="jump")
    assert tr["totals"]["forward_passes"] == 1 == tr["ideal"]["ideal_forward_passes"]
    date = r"(19|20)[0-9]{2}-[01][0-9]-[0-3][0-9]"
    tr = gen(engine, "When did Apollo 11 land?", Constraint("regex", date), mode="jump")
    assert tr["valid"] and tr["totals"]["reason"] == "complete"
    assert tr["ideal"]["ideal_forward_passes"] <= tr["totals"]["forward_passes"]
