"""Screening costs time linear in the text (issue 27): every shape of the shape corpus
(tests/security/shapes.py), at the largest size a field allows, goes through the screens a write of that
field runs (the poisoning guard, with the line search of a refused notebook, and the secret/PII scan on
the normalised form, with the maintained rule set) within a fixed CPU budget.

The budgets are the aims of the issue with headroom for a noisy, shared machine: an 8 KB fact aims at
20 ms and may take 100 ms here; a 1 MB notebook aims at 1 s and may take 5 s (prose takes about 0.6 s;
the heaviest shapes, percent-escaped text full of addresses and repeated key prefixes, 2-4 s). Before
this round, an 8 KB run of dashes after "ignore" took 4.2 s and a 32 KB run of digits 24 s
(bench/screening.py prints the figures per shape).
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from memory_admin.errors import Invalid
from memory_admin.selectors.access import Principal
from memory_admin.services import guard
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.pii import scan
from tests.security.shapes import shapes

BLOCK_ALL = {"email": "block", "phone": "block", "national_id": "block"}
AGENT = Principal(tenant_id=1, role="agent", actor="agent:cost-test")

# The shapes that cost the most per character, before this round (quadratic) or after (bench/screening.py):
# each is also screened at the largest field sizes. Every shape is screened at the fact size.
HEAVY = (
    "prose",
    "run/digits",
    "run/at",
    "run/pipe",
    "run/leet_mix",
    "run/leet_mix_at",
    "run/cyrillic",
    "run/cjk_bracket",
    "run/nbsp",
    "run/base64",
    "prefix/sk",
    "prefix/sk_ant+run",
    "prefix/ghp",
    "prefix/eyj",
    "prefix/xoxb",
    "prefix/password_eq+body",
    "guard/turns",
    "guard/features_mixed",
    "guard/image_link",
    "guard/send_to",
    "stretch/ignore+'-'",
    "nested/pct_of_b64",
    "nested/pct",
    "prefix/aiza",
    "prefix/aws_key_eq",
)


def screen(text: str) -> None:
    """What a write of an agent's text runs before anything is stored."""
    guard.clear_cache()
    try:
        refuse_instructions(AGENT, text, what="notebook")
    except Invalid:
        pass  # refused: the line search ran too
    scan(text, BLOCK_ALL)


def cpu_seconds(text: str) -> float:
    """The least of two runs: CPU time, so a busy neighbour does not count, and the lesser of two so a
    run that the machine interrupted does not fail the test."""
    times = []
    for _ in range(2):
        started = time.process_time()
        screen(text)
        times.append(time.process_time() - started)
        if times[-1] < 0.5 * budget_for(len(text)):
            break
    return min(times)


FIELDS = {  # field: (largest allowed size, CPU budget in seconds)
    "fact": (settings.MAX_FACT_BYTES, 0.100),
    "message": (settings.MAX_MESSAGE_BYTES, 0.400),
    "skill": (settings.MAX_SKILL_BYTES, 1.5),
    "notebook": (settings.MAX_NOTEBOOK_BYTES, 5.0),
}


def budget_for(size: int) -> float:
    return next(budget for limit, budget in sorted(FIELDS.values()) if size <= limit)


@pytest.fixture(autouse=True)
def _no_screening_budget(settings):
    """The budget would refuse a screen on a machine busy enough; here the CPU is measured instead."""
    settings.SCREENING_BUDGET_SECONDS = 10**6


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Load what the first screen of a process loads (the rule set, the tokeniser) outside the timing."""
    screen("warm up " * 10_000)


@pytest.mark.parametrize("shape", shapes(), ids=lambda s: s.name)
def test_every_shape_of_a_largest_fact_screens_within_its_budget(shape):
    size, budget = FIELDS["fact"]
    seconds = cpu_seconds(shape.text(size))
    assert seconds < budget, f"{shape.name}: {seconds * 1000:.0f} ms of CPU for a {size}-byte fact"


@pytest.mark.parametrize("field", ["message", "skill", "notebook"])
@pytest.mark.parametrize("name", HEAVY)
def test_the_heaviest_shapes_at_the_largest_size_of_a_field_screen_within_its_budget(field, name):
    shape = next(s for s in shapes() if s.name == name)
    size, budget = FIELDS[field]
    seconds = cpu_seconds(shape.text(size))
    assert seconds < budget, f"{name}: {seconds:.2f} s of CPU for a {size}-byte {field}"


def test_the_heavy_list_names_real_shapes():
    names = {s.name for s in shapes()}
    assert set(HEAVY) <= names


def test_the_screening_budget_counts_cpu_and_allows_four_times_its_length_of_waiting(settings):
    """A screen that waits (a machine busy with other work) is not refused before four times the budget
    has passed; one that spends the budget's CPU is."""
    from memory_admin.textnorm import ScreeningBudgetExceeded, check_budget, screening_budget

    settings.SCREENING_BUDGET_SECONDS = 0.2
    with screening_budget():
        time.sleep(0.3)  # past the budget's length, but no CPU spent
        check_budget()
    started = time.monotonic()
    with pytest.raises(ScreeningBudgetExceeded), screening_budget():
        while True:
            check_budget()
    assert time.monotonic() - started < 0.8 + 0.5  # refused, at the latest by the wall clock
    with pytest.raises(ScreeningBudgetExceeded), screening_budget():
        time.sleep(0.85)
        check_budget()
