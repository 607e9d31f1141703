"""Small causal LMs built offline, one per tokenizer family and architecture that a user
may bring (REFERENCES section 7): tokenizers trained here with the `tokenizers` library
on a small built-in corpus, random tiny weights from transformers configs. The tests and
`cfsm bench --suite tokenizers` use them; nothing is fetched from a hub."""

from __future__ import annotations

import json
import random
from pathlib import Path

from engine.lazy import lazy_module

hf_tokenizers = lazy_module("tokenizers")  # the library (cfsm.bench.tokenizers is a sibling)
decoders = lazy_module("tokenizers.decoders")
models = lazy_module("tokenizers.models")
normalizers = lazy_module("tokenizers.normalizers")
pre_tokenizers = lazy_module("tokenizers.pre_tokenizers")
trainers = lazy_module("tokenizers.trainers")
tf = lazy_module("transformers")
torch = lazy_module("torch")

FAMILIES = ("byte_level", "sp_prepend", "sp_metaspace", "sp_no_prefix", "unigram", "added_tokens")
FAMILY_TITLES = {
    "byte_level": "byte-level BPE (GPT-2 / Llama-3 / Qwen style)",
    "sp_prepend": "SentencePiece BPE, byte fallback, Prepend normalizer (Llama-2 legacy)",
    "sp_metaspace": "SentencePiece BPE, byte fallback, Metaspace prepend first (Llama-2 / Mistral)",
    "sp_no_prefix": "SentencePiece BPE, byte fallback, no prefix space (Gemma style)",
    "unigram": "Unigram, byte fallback, Metaspace",
    "added_tokens": "byte-level BPE with chat markers and <think> as added tokens",
}
ARCHS = ("llama", "qwen2", "mistral", "gemma", "phi3", "gpt2", "gpt_neox")
SPECIALS = ["<unk>", "<s>", "</s>"]
CHAT_MARKERS = ["<|im_start|>", "<|im_end|>"]
PLAIN_ADDED = ["<think>", "</think>"]

_WORDS = (
    "the of and to in is was he she it for on with as his her they at by this had not are but from "
    "or have an which one you were all we there can been has more if will would what their so who "
    "name house wand wood core length alive patronus bogart student teacher auror blood status "
    "pure half muggle born gryffindor slytherin ravenclaw hufflepuff deceased order phoenix death "
    "eater ministry magic harry potter hermione granger ron weasley city country population "
    "capital "
    "paris london tokyo berlin answer yes no true false null value title tags baking bread"
).split()


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    """Sentences and JSON records over a small vocabulary, with digits and punctuation:
    enough for merges that span the SGLang character task's keys and values."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
        rec = {
            "name": " ".join(rng.choice(_WORDS).title() for _ in range(2)),
            "house": rng.choice(["Gryffindor", "Slytherin", "Ravenclaw", "Hufflepuff"]),
            "length": round(rng.uniform(5, 20), 1),
            "alive": rng.choice(["Alive", "Deceased"]),
            "id": i,
        }
        out.append(json.dumps(rec, indent=rng.choice([None, 4])))
    out.append(
        "0123456789 {}[]\":,.-_+ \n\t' abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    )
    return out


def _byte_fallback_vocab(vocab: dict[str, int]) -> dict[str, int]:
    """<unk> <s> </s>, then <0x00>..<0xFF> as ordinary entries (as Llama-2 has them), then
    the learned pieces."""
    out = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        out[f"<0x{b:02X}>"] = len(out)
    for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        if tok not in out:
            out[tok] = len(out)
    return out


def _sp_bpe(family: str, vocab_size: int):
    # train on text already spelt with the meta symbol, as SentencePiece sees it
    tok = hf_tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    data = json.loads(tok.to_str())
    vocab = _byte_fallback_vocab(data["model"]["vocab"])
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]
    ]
    merges = [m for m in merges if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    out = hf_tokenizers.Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    if family == "sp_prepend":
        out.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
        )
    elif family == "sp_metaspace":
        out.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme="first", split=False
        )
    else:  # sp_no_prefix
        out.normalizer = normalizers.Replace(" ", "\u2581")
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if family != "sp_no_prefix":
        steps.append(decoders.Strip(" ", 1, 0))
    out.decoder = decoders.Sequence(steps)
    return out


def _unigram(vocab_size: int):
    tok = hf_tokenizers.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    data = json.loads(tok.to_str())
    pieces = [(p, s) for p, s in data["model"]["vocab"] if p not in SPECIALS]
    vocab = [(t, 0.0) for t in SPECIALS] + [(f"<0x{b:02X}>", -100.0) for b in range(256)] + pieces
    out = hf_tokenizers.Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    out.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    out.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return out


def _byte_level(vocab_size: int):
    tok = hf_tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    return tok


def build_tokenizer(family: str, vocab_size: int = 600):
    """A transformers fast tokenizer of `family` (see FAMILIES)."""
    if family not in FAMILIES:
        raise ValueError(
            f"unknown tokenizer family {family!r}; choose one of {', '.join(FAMILIES)}"
        )
    if family in ("byte_level", "added_tokens"):
        tok = _byte_level(vocab_size)
        kw = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    else:
        tok = _unigram(vocab_size) if family == "unigram" else _sp_bpe(family, vocab_size)
        kw = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, **kw)
    if family == "added_tokens":
        fast.add_special_tokens({"additional_special_tokens": CHAT_MARKERS})
        fast.add_tokens(PLAIN_ADDED)
    return fast


def _config(arch: str, vocab: int, tok):
    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=1024,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    if arch == "gpt2":
        return tf.GPT2Config(
            vocab_size=vocab,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=1024,
            eos_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id,
        )
    if arch == "gpt_neox":
        return tf.GPTNeoXConfig(**common)
    kv = {"num_key_value_heads": 1}
    if arch == "llama":
        return tf.LlamaConfig(**common, **kv)
    if arch == "qwen2":
        return tf.Qwen2Config(**common, **kv)
    if arch == "mistral":
        return tf.MistralConfig(**common, **kv, sliding_window=16)
    if arch == "gemma":
        return tf.GemmaConfig(**common, **kv, head_dim=16)
    if arch == "phi3":
        return tf.Phi3Config(**common, **kv, pad_token_id=tok.eos_token_id)
    raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")


def build_model(
    folder: Path | str,
    family: str = "byte_level",
    arch: str = "llama",
    seed: int = 0,
    vocab_size: int = 600,
    logits: int | None = None,
) -> Path:
    """Save a tokenizer of `family` and random tiny `arch` weights into `folder`; returns it.
    The output layer has 8 rows more than the tokenizer (as real models pad theirs), or
    `logits` rows: the same model with rows added past those (a large model's vocabulary
    width over a small tokenizer; the first rows' weights do not change)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(family, vocab_size)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(_config(arch, len(tok) + 8, tok))
    if logits and logits > len(tok) + 8:
        model.resize_token_embeddings(logits, mean_resizing=False)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
