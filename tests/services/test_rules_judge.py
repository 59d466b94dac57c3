"""The offline contradiction judge calls two statements contradictory only when one negates what the other
states, or gives a one-valued predicate another value; small talk, questions and two people's words are
not contradictions. A false "contradiction" is not harmless: the write path supersedes the fact with
lower confidence (SPEC step 5) or sends the pair to the review queue, and a contested fact ranks lower.

The two corpora were written for this test (third-person facts as agents write them, and transcript lines
as a relayed two-person chat stores them); none is taken from the LoCoMo evaluation data."""

from __future__ import annotations

import pytest

from memory_admin.services.judge import rules_judge

CONTRADICTIONS = [
    ("The user likes green tea", "The user does not like green tea"),
    ("The user lives in Madrid", "The user no longer lives in Madrid"),
    ("The user drinks coffee before work", "The user stopped drinking coffee before work"),
    ("The user is vegetarian", "The user isn't vegetarian"),
    ("The user eats fish on Fridays", "The user never eats fish on Fridays"),
    ("The user likes olives", "The user dislikes olives"),
    ("The user owns a motorbike", "The user doesn't own a motorbike anymore"),
    ("The user can drive", "The user cannot drive"),
    ("The user has a cat", "The user has no cat"),
    ("Priya works at Initech", "Priya no longer works at Initech"),
    ("The user is allergic to peanuts", "The user is not allergic to peanuts"),
    ("The user speaks Portuguese", "The user doesn't speak Portuguese"),
    ("The user enjoys running marathons", "The user hates running marathons"),
    ("The user wants a standing desk", "The user does not want a standing desk"),
    ("The user takes the train to the office", "The user never takes the train to the office"),
    ("Omar: I love camping by the lake", "Omar: I don't love camping by the lake"),
    ("The user uses dark mode in the editor", "The user doesn't use dark mode in the editor"),
    ("The user prefers vim", "The user prefers emacs"),
    ("The user lives in Oslo", "The user lives in Bergen"),
    ("The user's favourite colour is teal", "The user's favourite colour is orange"),
    ("The user likes tea, but not coffee", "The user likes coffee"),
    ("The user is married", "The user is not married"),
    # What someone is, by a form of "to be": one value.
    ("The user is single", "The user is married"),
    ("The user is 34 years old", "The user is 41 years old"),
    ("The user is a nurse", "The user is a teacher"),
    ("The user is now a manager at the depot", "The user is an intern at the depot"),
]

NOT_CONTRADICTIONS = [
    # Two one-valued predicates, one value each: nothing is said twice.
    ("Ana is the user's sister.", "The user's sister Ana lives in Porto."),
    ("The user is a nurse in Leeds", "The user lives in Leeds"),
    ("Priya works at Initech in Leeds", "Priya lives in Leeds"),
    # How or where someone is at the moment of speaking is not a value of what they are.
    (
        "Noor: Cheer up, Ben. The user is here to listen whenever you need.",
        "Noor: Cheer up, Ben. The user is glad to listen.",
    ),
    ("Femi: Go, Ada! The user is here for you!", "Femi: You got this, Ada! The user is always there for you."),
    ("Iris: Hi Tom! Hope all is good.", "Iris: Hi Tom! Hope your knee is feeling better."),
    # Small talk whose negation negates nothing the other line states.
    ("Sam: Can't wait to see the new studio!", "Sam: See you on Saturday!"),
    ("Lea: Never give up on it, you're nearly there!", "Lea: Keep it up!"),
    ("Ravi: Don't forget to rest this weekend.", "Ravi: Take care and rest well."),
    ("Kim: Hey Jo, long time no see! How was the trip?", "Kim: See you soon, Jo!"),
    ("Ben: Thanks a lot, I couldn't have finished without your help.", "Ben: Thanks, your help means a lot to me!"),
    ("Mia: No worries at all, happy to help.", "Mia: Happy to help with the move!"),
    ("Tom: I haven't tried it yet, but I'll check them out.", "Tom: I'll check them out this week. Thanks!"),
    ("Ana: I'm not gonna let anything stop me now.", "Ana: I'm gonna make it happen this year."),
    ("Joe: I just can't stop painting lately.", "Joe: Painting keeps me calm lately."),
    ("Eve: Not bad at all, the new job is great.", "Eve: The new job is really great."),
    # Questions ask; they state nothing.
    ("Noa: Did you not get my message about the party?", "Noa: I sent you a message about the party."),
    ("The user asked: isn't the meeting on Monday?", "The meeting is on Monday"),
    # Two people's words: each statement is about its own speaker.
    ("Ana: I don't live in Porto any more.", "Ben: I live in Porto."),
    ("Gil: I never drink coffee.", "Hana: I drink coffee every morning."),
    # A negation about something the other statement does not mention.
    ("The user likes tea but not coffee", "The user likes tea"),
    ("The user plays chess, never poker", "The user plays chess on Sundays"),
    ("The user does not own a car", "The user rides a bike to work"),
    ("The user moved to Lisbon without a job offer", "The user moved to Lisbon in May"),
    # Statements that simply agree.
    ("The user likes hiking", "The user enjoys hiking in the Alps"),
    ("The user works at Globex", "The user works at Globex as a designer"),
]


@pytest.mark.parametrize(("a", "b"), CONTRADICTIONS)
def test_a_statement_and_its_negation_or_another_value_are_contradictory(a, b):
    assert rules_judge(a, b).contradictory, (a, b)
    assert rules_judge(b, a).contradictory, (b, a)


@pytest.mark.parametrize(("a", "b"), NOT_CONTRADICTIONS)
def test_small_talk_questions_and_other_speakers_are_not_contradictions(a, b):
    verdict = rules_judge(a, b)
    assert not verdict.contradictory, (a, b, verdict.reason)
    assert not rules_judge(b, a).contradictory, (b, a)


def test_the_reason_names_the_predicate_both_statements_give_a_value():
    verdict = rules_judge("The user is a nurse and prefers vim", "The user is a nurse and prefers emacs")
    assert verdict.contradictory and verdict.reason == "same one-valued predicate ('prefers') with different values"


def test_two_speakers_are_told_apart_and_the_reason_says_so():
    verdict = rules_judge("Ana: I don't live in Porto any more.", "Ben: I live in Porto.")
    assert verdict.reason == "said by different speakers"
    # The same speaker's lines are still compared.
    assert rules_judge("Ana: I live in Porto.", "Ana: I don't live in Porto any more.").contradictory


def test_the_write_path_s_rewriting_of_the_first_person_does_not_make_a_contradiction():
    """The write path names the user one way before judging ("my way" → "the user's way"): the possessive
    and the contractions it leaves are not words a negation can oppose."""
    from memory_admin.services.facts.subject import UserSubject

    subject = UserSubject(names=("sol",))
    a = subject.about("Sol: Thanks! It's hard when things don't go my way, but I'll keep pushing.")
    b = subject.about("Sol: Thanks! I'll do my best and keep pushing.")
    assert not rules_judge(a, b).contradictory
    a = subject.about("Sol: I won't quit, even when it's hard. I'm gonna make it!")
    b = subject.about("Sol: I won't quit. I'm gonna keep going, whatever comes my way.")
    assert not rules_judge(a, b).contradictory
    assert rules_judge(subject.about("I live in Quito"), subject.about("I don't live in Quito any more")).contradictory
    # "I'm" becomes "the user is": a passing state is still not a value of what the user is.
    a = subject.about("Sol: Chin up, Kai. I'm here whenever you want to talk.")
    b = subject.about("Sol: Chin up, Kai. I'm happy to talk whenever you want.")
    assert not rules_judge(a, b).contradictory
    assert rules_judge(
        subject.about("I'm a nurse at the clinic"), subject.about("I'm a porter at the clinic")
    ).contradictory


@pytest.mark.parametrize(
    "text",
    [
        "word " * 1600,
        "x" * 8000,
        "not " * 2000,
        "is it? " * 1100,
        "Ana: " + "not like tea, " * 600,
        "The user lives in " + "lives " * 1300 + "Oslo",
    ],
    ids=["no punctuation", "no spaces", "negations", "questions", "speaker", "one predicate repeated"],
)
def test_judging_two_8_kb_statements_takes_linear_time(text):
    """A fact may be 8 KB and the judge runs on every neighbour of every write: no shape of text may make it
    quadratic (a question pattern scanning to the end from every position took ~0.5 s a pair, reading
    a one-valued predicate's value after each of its 1,300 repeats 2.5 s). A CPU-time
    budget with ~20x headroom over the measured ~5 ms."""
    import time

    started = time.process_time()
    rules_judge(text, text[::-1])
    rules_judge(text, text.replace("Oslo", "Bergen"))
    assert time.process_time() - started < 0.1
