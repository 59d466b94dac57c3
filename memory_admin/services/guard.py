"""Poisoning guard (SPEC §4 step 2): memory that reads as instructions to a model is quarantined."""

from __future__ import annotations

import re

_PATTERNS = [
    r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:previous|prior|above|earlier|all|your|system)\b.{0,30}\b(?:instructions?|prompts?|rules|directions|guidelines)\b",
    r"\byou are now\b",
    r"\b(?:new|updated|real) (?:system )?instructions?\s*:",
    r"\bsystem\s*prompt\b",
    r"\bdeveloper\s+mode\b",
    r"\bjailbreak\b",
    r"<\|im_start\|>|<\|im_end\|>|<\|system\|>|<\|endoftext\|>",
    r"\[/?INST\]|<</?SYS>>",
    r"</?(?:system|assistant|tool_call|function_call|tool)\b[^>]*>",
    r"\"(?:tool_calls?|function_call)\"\s*:",
    r"\b(?:always|must) (?:respond|reply|answer) (?:with|only)\b",
    r"\bdo not (?:tell|reveal|inform) the user\b",
    r"\b(?:exfiltrate|send (?:all|the) (?:data|secrets|credentials) to)\b",
]
_RX = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.I | re.S)


def injection_reason(text: str) -> str | None:
    """The matched phrase (trimmed) when `text` reads as instructions to a model, else None."""
    m = _RX.search(text)
    if m is None:
        return None
    return f"reads as instructions to a model: “{m.group()[:60]}”"
