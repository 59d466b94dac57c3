"""The scanner sees through every disguise of the corpus, leaves benign look-alikes alone, and never
hands back the raw value (preview, redaction, fingerprint)."""

from __future__ import annotations

import pytest

from memory_admin.services.pii import find, fingerprint, scan
from tests.security.corpus import BENIGN, SECRETS, canon, cases

CASES = cases()
BLOCK_ALL = {"email": "block", "phone": "block", "national_id": "block"}
REDACT_ALL = {"email": "redact", "phone": "redact", "national_id": "redact"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_disguise_is_found_and_nothing_of_it_survives_redaction(case):
    result = scan(case.text, BLOCK_ALL)
    assert case.kind in result.kinds, f"{case.name} was not found in {case.text!r}"
    assert result.blocked and result.content == ""
    redacted = scan(case.text, REDACT_ALL)
    leftovers = [redacted.preview, redacted.fingerprint]
    if not redacted.blocked:  # contact PII: redacted in place, the rest of the sentence kept
        assert case.kind not in {f.kind for f in find(redacted.content)}
        assert "Alice" in redacted.content
        leftovers.append(redacted.content)
    for needle in case.needles:
        for text in leftovers:
            assert needle not in canon(text), (case.name, needle, text)


def test_the_corpus_covers_every_kind_with_many_disguises():
    kinds = {c.kind for c in CASES}
    assert kinds >= {
        "openai_key",
        "github_token",
        "aws_access_key",
        "aws_secret_key",
        "slack_token",
        "stripe_key",
        "google_api_key",
        "jwt",
        "private_key",
        "card_number",
        "email",
        "phone",
        "national_id",
    }
    assert len(CASES) >= 150


@pytest.mark.parametrize("text", BENIGN)
def test_benign_look_alikes_pass_untouched(text):
    result = scan(text, BLOCK_ALL)
    assert not result.findings, [(f.kind, text[f.start : f.end]) for f in result.findings]
    assert result.content == text


@pytest.mark.parametrize("key", ["openai_key", "aws_access_key", "email", "card_number"])
def test_a_disguised_value_has_the_fingerprint_of_the_plain_one(key):
    value = SECRETS[key][0]
    by_name = {c.name.split("/")[1]: c for c in CASES if c.name.startswith(key + "/")}
    prints = set()
    for evasion in ("plain", "zero_width", "cyrillic", "fullwidth", "nbsp_double_space"):
        if evasion not in by_name:
            continue
        text = by_name[evasion].text
        prints.add(fingerprint(text, find(text)))
    assert len(prints) == 1, value


def test_redaction_cuts_the_original_including_invisible_characters_inside_the_token():
    text = "mail al\u200bice.se\u200bcret＠exam\u200bple.org or call +1415\u00a0555\u00a00123, thanks"
    result = scan(text, REDACT_ALL)
    assert result.redacted and not result.blocked
    assert result.content == "mail [REDACTED:email] or call [REDACTED:phone], thanks"


def test_bare_numbers_count_as_phones_or_ssns_only_next_to_a_word_that_says_so():
    assert [f.kind for f in find("call me on 4155550123")] == ["phone"]
    assert [f.kind for f in find("her ssn: 078051120")] == ["national_id"]
    assert find("order 4155550123 and ticket 078051120") == []
    assert [f.kind for f in find("reach me at +14155550123")] == ["phone"]


def test_aws_secret_access_key_with_context_or_random_enough_alone():
    context = "aws_secret_access_key = abcdefghij" + "ABCDEFGHIJ0123456789abcdefghij"
    assert [f.kind for f in find(context)] == ["aws_secret_key"]
    assert find("a 40-character git sha: " + "0123456789abcdef" * 2 + "01234567") == []
    stray = "stray token wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ3kP9x2Lm here"
    assert [f.kind for f in find(stray)] == ["aws_secret_key"]


def test_a_hidden_token_is_found_when_the_fold_tables_start_afresh_halfway_through_the_text():
    """The fold tables are bounded (textnorm._FoldTable.LIMIT distinct characters). A text that meets a
    new character once they are full starts them afresh; the zero-width space it met before must still
    be cut out, or the token it splits reads as two harmless pieces."""
    from memory_admin import textnorm

    text = "key sk-proj-Ab3dE5gH\u200b9jK1mN2pQ4rS6tU8vW0xYz and "
    fresh = "".join(chr(cp) for cp in range(0x4E00, 0x4E10))  # met for the first time after the token
    table = textnorm._FOLD_ONE
    table.clear()
    textnorm.fold_mapped(text)  # its characters, the zero-width space among them, are in the table
    filler = (chr(cp) for cp in range(0x5000, 0x5000 + 2 * table.LIMIT))
    textnorm.fold_mapped("".join(next(filler) for _ in range(table.LIMIT + 1 - len(table))))
    assert len(table) == table.LIMIT + 1  # full: the next new character starts it afresh

    assert [f.kind for f in find(text + fresh)] == ["openai_key"]
