"""Presets for the playground: each teaches something about jump-forward."""

from __future__ import annotations

import json
from pathlib import Path

_BENCH = (
    Path(__file__).resolve().parent.parent.parent
    / "shared"
    / "paper-bench"
    / "sglang_json_benchmark.json"
)

# real-world schemas from JSONSchemaBench, read where the sample is (not copied here: the
# presets are left out without ../shared)
_JSB = _BENCH.parent.parent / "bench-data" / "jsonschemabench"
REAL_SCHEMAS = {
    "Shipment, 54 properties (real schema: JSONSchemaBench Github_hard/o75565)": {
        "file": "Github_hard/o75565.json",
        "prompt": "Create a shipment of one 2 kg parcel from Berlin to Munich with DHL, with "
        "the sender and the receiver, as JSON.",
    },
    "Function arguments with a date-time (real schema: Glaive analyze_health_data)": {
        "file": "Glaiveai2K/analyze_health_data_4ad104b4.json",
        "prompt": "Call analyze_health_data with two measurements taken on 1 March 2024: "
        "temperature 36.6 and heart rate 72. Give the arguments as JSON.",
    },
}

# fallbacks so the app works without ../shared (the regexes are the SGLang benchmark's data)
_CHARACTER_RX = (
    r'\{\n    "name": "[\w\d\s]{1,16}",\n    "house": '
    r'"(Gryffindor|Slytherin|Ravenclaw|Hufflepuff)",\n    "blood status": '
    r'"(Pure-blood|Half-blood|Muggle-born)",\n    "occupation": "(student|teacher|auror|ministry '
    r'of magic|death eater|order of the phoenix)",\n    "wand": \{\n        "wood": '
    r'"[\w\d\s]{1,16}",\n        "core": "[\w\d\s]{1,16}",\n        "length": '
    r'[0-9]{1,2}\.[0-9]{0,2}\n    \},\n    "alive": "(Alive|Deceased)",\n    "patronus": '
    r'"[\w\d\s]{1,16}",\n    "bogart": "[\w\d\s]{1,16}"\n\}'
)
_CITY_RX = (
    r'\{\n  "name": "[\w\d\s]{1,16}",\n  "country": "[\w\d\s]{1,16}",\n  "latitude": '
    r'[-+]?[0-9]*\.?[0-9]{0,2},\n  "population": [-+]?[0-9]{1,9},\n  "top 3 landmarks": '
    r'\["[\w\d\s]{1,16}", "[\w\d\s]{1,16}", "[\w\d\s]{1,16}"\]\n\}'
)
PARIS = (
    "Paris is the capital and largest city of France. With an estimated population of 2,102,650 "
    "residents in January 2023 in an area of more than 105 km2, Paris is the fourth-most populous "
    "city in the European Union. It lies on the Seine at a latitude of 48.86 degrees north. Its "
    "landmarks include the Eiffel Tower, the Louvre museum and the Notre-Dame cathedral.\n"
)

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "maxLength": 60},
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "New York"]},
    },
    "required": ["name", "age", "email", "city"],
    "additionalProperties": False,
}

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        # every part bounded, so that both whitespace presets finish and differ only in
        # what flexible whitespace does to the jumps
        "orderId": {"type": "integer", "minimum": 1, "maximum": 99999},
        "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
        "express": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 3},
    },
    "required": ["orderId", "status", "express", "items"],
    "additionalProperties": False,
}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 30},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 30}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
]
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "integer", "minimum": 0, "maximum": 1000},
        "unit": {"type": "string", "enum": ["apples", "pears"]},
    },
    "required": ["answer", "unit"],
    "additionalProperties": False,
}


def _bench() -> dict:
    try:
        return json.loads(_BENCH.read_text())
    except (OSError, ValueError):
        return {}


def real_schema_presets() -> dict[str, dict]:
    """The real-world schemas as presets (fsm draws them; auto tells what it chose)."""
    out = {}
    for name, p in REAL_SCHEMAS.items():
        try:
            text = (_JSB / p["file"]).read_text(encoding="utf-8")
        except OSError:
            continue
        out[name] = {"kind": "schema", "text": text, "whitespace": "compact",
                     "prompt": p["prompt"], "mode": "jump"}  # fmt: skip
    return out


def presets() -> dict[str, dict]:
    b = _bench()
    char = b.get("character", {})
    city = b.get("city", {})
    char_prompt = char.get(
        "prompt_template",
        "{name} is a character in Harry Potter. Please fill in the following information about "
        "this character.\n",
    )
    city_prompt = city.get(
        "prompt_template",
        "Please extract the information of a city from the following wikipedia page.\n"
        "Page begin.\n{document}Page end.\nHere is the name, country, and symbol of the city in "
        "JSON format.\n",
    )
    return {
        "SGLang character (regex)": {
            "kind": "regex",
            "text": char.get("regex", _CHARACTER_RX),
            "whitespace": "compact",
            "prompt": char_prompt.format(name="Hermione Granger"),
            "mode": "jump",
        },
        "SGLang city (regex)": {
            "kind": "regex",
            "text": city.get("regex", _CITY_RX),
            "whitespace": "compact",
            "prompt": city_prompt.format(document=PARIS),
            "mode": "jump",
        },
        "Person (JSON schema)": {
            "kind": "schema",
            "text": json.dumps(PERSON_SCHEMA, indent=2),
            "whitespace": "spaced",
            "prompt": "Invent a person who lives in Tokyo and describe them as JSON.",
            "mode": "jump",
        },
        "Date (regex)": {
            "kind": "regex",
            "text": r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
            "whitespace": "compact",
            "prompt": "On what date did Apollo 11 land on the Moon? Answer as YYYY-MM-DD.",
            "mode": "jump",
        },
        "IPv4 address (regex)": {
            "kind": "regex",
            "text": (
                r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}"
                r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
            ),
            "whitespace": "compact",
            "prompt": "What is the usual IP address of a home router?",
            "mode": "jump",
        },
        "Enum with shared prefixes (regex)": {
            "kind": "regex",
            "text": r"Status: (international|internal|interview|intern)\.",
            "whitespace": "compact",
            "prompt": "Pick a status word starting with 'inter'.",
            "mode": "jump",
        },
        "CJK (regex)": {
            "kind": "regex",
            "text": r"城市：(北京|上海|广州|深圳)。人口：[0-9]{3,4}万。",
            "whitespace": "compact",
            "prompt": "用中文回答：中国最大的城市是哪个？人口多少？",
            "mode": "jump",
        },
        "Flexible whitespace: poor speedup (JSON schema)": {
            "kind": "schema",
            "text": json.dumps(ORDER_SCHEMA, indent=2),
            "whitespace": "flexible",
            "prompt": "Write a JSON order with id 1042 that was shipped by express with two books.",
            "mode": "jump",
        },
        "Same order, compact separators (JSON schema)": {
            "kind": "schema",
            "text": json.dumps(ORDER_SCHEMA, indent=2),
            "whitespace": "compact",
            "prompt": "Write a JSON order with id 1042 that was shipped by express with two books.",
            "mode": "jump",
        },
        "Reasoning, then JSON (thinking budget)": {
            "kind": "schema",
            "text": json.dumps(ANSWER_SCHEMA, indent=2),
            "whitespace": "compact",
            "prompt": "Tom has 3 apples and buys 4 more. Think step by step inside <think> "
            "</think>, then give the answer as JSON.",
            "mode": "jump",
            "reasoning": True,
            "think_budget": 32,
        },
        # the embedded model opens ```json blocks: a template whose start tag it writes
        # shows the trigger inside free text (the prompt shows it the tools in these tags)
        "Tool calls, auto (tools)": {
            "kind": "tools",
            "text": json.dumps(TOOLS, indent=2),
            "tool_choice": "auto",
            "tool_start": "```json\n",
            "tool_end": "\n```",
            "whitespace": "compact",
            "prompt": "Write the tool call get_weather for Paris (celsius) as a JSON object in a "
            "```json block.",
            "mode": "jump",
        },
        "Tool calls, required (tools)": {
            "kind": "tools",
            "text": json.dumps(TOOLS, indent=2),
            "tool_choice": "required",
            "whitespace": "compact",
            "prompt": "What time is it in Tokyo? Use a tool.",
            "mode": "jump",
        },
        **real_schema_presets(),
        "Colour (EBNF grammar)": {
            "kind": "grammar",
            "text": 'root ::= "The colour is " ("red" | "green" | "blue") "."',
            "whitespace": "compact",
            "prompt": "What colour is the sky?",
            "mode": "jump",
            "backend": "xgrammar",
        },
    }
