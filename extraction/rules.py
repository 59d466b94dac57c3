"""The offline extractor: no model, no network, so the product works out of the box.

It reads first-person statements clause by clause ("I moved from Berlin to Lisbon last month and I now work
at Globex as a product manager": four facts) and rewrites them in the third person: slots the write path
keys (where the speaker lives, works, and as what), relatives ("my sister Ana"), likes, hobbies, pets,
plans and events, with relative dates written out from the message's time. A line that names its speaker
("Ana: ...", a two-person chat relayed by an agent) is about that speaker; otherwise only the user's own
words count. It is deliberately conservative: questions, hedges ("I think", "maybe"), hypotheticals,
reactions ("I'm so happy for you") and what the other person is told ("your ...") are skipped, because a
wrong memory costs more than a missing one. Facts it writes are labelled `extractor="rules-v2"` so nobody
mistakes them for a model's output. The entities and relations it finds (`clause_graph`) are also what the
offline entity drawing (services.entity_draw) reads from every stored fact. It also writes the extractive
episode summary used when no model is configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.utils import timezone

from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft
from memory_admin.services.entity_kinds import kind_of
from memory_admin.services.guard import verdict

NAME = "rules-v2"


@dataclass(frozen=True)
class RuleFact:
    content: str
    category: str
    kind: str
    confidence: float
    key: str | None
    message_index: int
    # The entities the fact names (the user themself as its subject) and the relations it states.
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationDraft, ...] = ()


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_HEDGE = re.compile(
    r"\b(maybe|perhaps|probably|might|not sure|i think|i guess|i wonder|if i|would i|should i|"
    r"could i|do i|am i|can i|was wondering|hypothetically|imagine|pretend|let's say)\b",
    re.I,
)
_NAME_VALUE = r"([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})"
_VALUE = r"(.{2,160}?)"
_END = r"\s*[.!]?$"

# (pattern over one clause, category, kind, key, template). Templates use {0}, {1} for groups.
_RULES: list[tuple[re.Pattern[str], str, str, str | None, str]] = [
    (
        re.compile(rf"^(?:my name is|call me|i am called|i'm called)\s+{_NAME_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.name",
        "The user's name is {0}.",
    ),
    (
        re.compile(rf"^my timezone is\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.timezone",
        "The user's timezone is {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:based|located|headquartered) in\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.location",
        "The user is based in {0}.",
    ),
    (re.compile(rf"^i live in\s+{_VALUE}{_END}", re.I), "personal", "fact", "user.location", "The user lives in {0}."),
    (re.compile(rf"^i(?:'m| am) from\s+{_VALUE}{_END}", re.I), "personal", "fact", None, "The user is from {0}."),
    (
        re.compile(rf"^i(?:'m| am)? (?:currently |now |still )?(?:work|working) (?:at|for)\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "work.employer",
        "The user works at {0}.",
    ),
    (re.compile(rf"^i (?:manage|lead|run)\s+{_VALUE}{_END}", re.I), "project", "fact", None, "The user manages {0}."),
    (
        re.compile(rf"^i(?:'m| am)? (?:currently |now |still )?(?:work|working) on\s+{_VALUE}{_END}", re.I),
        "project",
        "fact",
        None,
        "The user works on {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:a|an)\s+{_VALUE}(?: at\s+(.{{2,80}}?))?{_END}", re.I),
        "personal",
        "fact",
        "work.role",
        "The user is a {0}.",
    ),
    (
        re.compile(rf"^my (?:job|role|title) is\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "work.role",
        "The user's role is {0}.",
    ),
    (
        re.compile(rf"^my (?:favou?rite)\s+([\w .+#-]{{2,40}}?)\s+is\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user's favourite {0} is {1}.",
    ),
    (
        re.compile(rf"^i (?:really |strongly )?(prefer|like|love|enjoy|hate|dislike|avoid)\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user {0}s {1}.",
    ),
    (
        re.compile(rf"^i (?:don't|do not) (like|use|want|enjoy)\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user does not {0} {1}.",
    ),
    (
        re.compile(
            rf"^(?:i|we) (?:mostly |usually |always |mainly )?(?:use|am using|'m using|are using|'re using)\s+"
            rf"{_VALUE}{_END}",
            re.I,
        ),
        "technical",
        "fact",
        None,
        "The user uses {0}.",
    ),
    (
        re.compile(rf"^i(?:'ve| have)? (?:just |recently )?(?:moved|relocated) to\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.location",
        "The user moved to {0}.",
    ),
    (
        re.compile(rf"^i (?:visited|went to|travell?ed to|flew to)\s+{_NAME_VALUE}(?:\s.*)?{_END}", re.I),
        "personal",
        "fact",
        None,
        "The user visited {0}.",
    ),
    (
        re.compile(
            rf"^i (?:write|code|program) (?:most |all |mostly )?(?:of )?(?:my )?(?:code )?in\s+{_VALUE}{_END}", re.I
        ),
        "technical",
        "fact",
        None,
        "The user writes code in {0}.",
    ),
    (
        re.compile(rf"^i (?:switched|moved|migrated) (?:from\s+(.{{2,60}}?)\s+)?to\s+{_VALUE}{_END}", re.I),
        "technical",
        "fact",
        None,
        "The user switched to {1}.",
    ),
    (
        re.compile(
            rf"^my (?:main |primary |preferred |favou?rite )?(editor|language|os|shell|ide|stack|laptop|setup) is\s+"
            rf"{_VALUE}{_END}",
            re.I,
        ),
        "technical",
        "fact",
        "tools.{0}",
        "The user's {0} is {1}.",
    ),
    (
        re.compile(rf"^i(?:'ve| have) decided to\s+{_VALUE}{_END}|^i decided to\s+{_VALUE}{_END}", re.I),
        "project",
        "decision",
        None,
        "The user decided to {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:planning|going|about) to\s+{_VALUE}{_END}|^i plan to\s+{_VALUE}{_END}", re.I),
        "project",
        "fact",
        None,
        "The user plans to {0}.",
    ),
    (re.compile(rf"^my (?:goal|plan) is to\s+{_VALUE}{_END}", re.I), "project", "fact", None, "The user plans to {0}."),
]

_PRONOUNS = [
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bour\b", re.I), "their"),
    (re.compile(r"\bwe\b", re.I), "they"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bmyself\b", re.I), "themself"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bI'm\b"), "they are"),
    (re.compile(r"\bI've\b"), "they have"),
    (re.compile(r"\bI\b"), "they"),
]
_VERB_S = {
    "prefer": "prefers",
    "like": "likes",
    "love": "loves",
    "enjoy": "enjoys",
    "hate": "hates",
    "dislike": "dislikes",
    "avoid": "avoids",
}


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text.strip().rstrip(".,;:")


# --- Sentences and clauses -------------------------------------------------------------------------

# "I use vim and I live in Berlin", "I moved to Lisbon, but now I work...": one statement each.
_CLAUSE_SPLIT = re.compile(
    r"(?:,\s*|\s+)(?:and|but|so|also|plus|then|because|since|while|although|though)\s+(?:now\s+|then\s+|also\s+)?"
    r"(?=(?:i|i'm|i've|i'll|my|we|we're|we've)\b)"
    r"|,\s+(?=(?:i|i'm|i've|i'll)\b)"
    r"|\s+[-–—]+\s+",
    re.I,
)
_DISCOURSE = re.compile(
    r"^(?:(?:oh|well|also|btw|by the way|and|actually|so|yes|yeah|yep|ok|okay|fyi|hi|hello|hey|wow|haha|"
    r"honestly|um|hmm|omg|lol|sure|right|definitely|totally|absolutely|true|cool|nice|awesome|great|"
    r"anyway|anyways|guess what|speaking of which|funny enough|you know what)[,!.]?\s+)+",
    re.I,
)
# "my gf and I": a subject of two, not two clauses (the split above cut it; glued back).
# A full stop after a title is not a sentence's end ("St. Mary's Hospital", "Dr. Lee").
_STATEMENT_END = re.compile(
    r"(?<!\bSt\.)(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bJr\.)(?<!\bSr\.)(?<=[.!?;])\s+|(?<=[.!?][\x22\x27\u201d\u2019])\s+|\n+"
)
_PAIR_HEAD = re.compile(r"^(?:my|our)(?:\s+[\w'-]+){1,2}$", re.I)
_CAPTION = re.compile(r"\s*\[(?:shares?|shared|sends?|sent) [^\]]*\]", re.I)
_SPEAKER_LINE = re.compile(r"^\s*([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*){0,2}):\s+(?=\S)")
# Labels that are not a person's name: the line is read as unlabelled ("Note: I moved to Porto").
_NOT_SPEAKERS = frozenset(
    """note ps update edit todo fyi re warning error hint question answer summary context reminder important
    example fact facts info background also btw""".split()
)
# Labels that name the user of a transcript ("User: I live in Berlin"): the user's own words.
_USER_LABELS = frozenset({"user", "me", "human", "customer", "client"})
# Labels that name the agent: its words are not the user's life.
_AGENT_LABELS = frozenset({"assistant", "ai", "bot", "agent", "system", "model", "gpt", "claude"})


def statements(text: str) -> list[str]:
    """The clauses of a text, one statement each, without leading discourse words ("Oh, and I use vim")."""
    out: list[str] = []
    for sentence in _STATEMENT_END.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        pieces = [p.strip() for p in _CLAUSE_SPLIT.split(sentence) if p and p.strip()]
        glued: list[str] = []
        for piece in pieces:
            if glued and _PAIR_HEAD.match(glued[-1]) and re.match(r"i\b", piece, re.I):
                glued[-1] = f"{glued[-1]} and {piece}"
            else:
                glued.append(piece)
        for clause in glued:
            clause = _DISCOURSE.sub("", clause.strip())
            if clause:
                out.append(clause)
    return out


def speaker_of(text: str) -> tuple[str | None, str]:
    """(speaker, words) of a transcript line ("Ana: I moved to Porto"): a two-person chat relayed by an
    agent names who speaks; (None, text) for a line without such a label, (None, words) for a label that
    names no one ("Note:"); "user" / "assistant" (lower case) for the labels that name the two sides."""
    m = _SPEAKER_LINE.match(text)
    label = m.group(1).casefold() if m else ""
    if m is None:
        return None, text
    if label in _NOT_SPEAKERS:
        return None, text[m.end() :]
    if label in _USER_LABELS or label in _AGENT_LABELS:
        return label, text[m.end() :]
    return m.group(1), text[m.end() :]


# --- Dates ----------------------------------------------------------------------------------------

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SHORT_DAYS = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2}
_RELATIVE = re.compile(
    r"\b(?:(yesterday|today|tonight|this morning|this afternoon|this evening|last night|earlier today)"
    r"|(last|this|next) (week|weekend|month|year|" + "|".join(_WEEKDAYS) + "|" + "|".join(_SHORT_DAYS) + r")\.?"
    r"|(a|an|one|two|three|four|five|six|a couple of|a few|several|\d{1,2}) (day|week|month|year)s? ago)\b",
    re.I,
)
_FRONT_TIME = re.compile(
    r"^((?:just\s+)?(?:yesterday|today|tonight|this morning|this afternoon|this evening|last night|earlier today|"
    r"(?:last|this|next) \w+|(?:a|an|one|two|three|a few|a couple of|several|\d{1,2}) \w+ ago))\s*,?\s+"
    r"(?=(?:i|i'm|i've|we|we're|my)\b)",
    re.I,
)


def _day(d) -> str:
    return f"{d.day} {d:%B %Y}"


def _month(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{date(year, month, 1):%B %Y}"


def _resolve(m: re.Match, today: date) -> str:
    one, which, unit, count, ago_unit = m.groups()
    if one:
        one = one.lower()
        return f"on {_day(today - timedelta(days=1) if one in ('yesterday', 'last night') else today)}"
    if which:
        which, unit = which.lower(), unit.lower()
        step = {"last": -1, "this": 0, "next": 1}[which]
        if unit in _SHORT_DAYS:
            unit = _WEEKDAYS[_SHORT_DAYS[unit]]
        if unit in _WEEKDAYS:
            target = _WEEKDAYS.index(unit)
            delta = (today.weekday() - target) % 7 or 7
            day = today - timedelta(days=delta) if step < 0 else today + timedelta(days=(target - today.weekday()) % 7)
            if step > 0 and day == today:
                day += timedelta(days=7)
            return f"on {unit.capitalize()}, {_day(day)}"
        if unit == "month":
            return f"in {_month(today.year, today.month + step)}"
        if unit == "year":
            return f"in {today.year + step}"
        where = {"last": "before", "this": "of", "next": "after"}[which]
        return f"in the {unit} {where} {_day(today)}"
    count = count.lower()
    n = int(count) if count.isdigit() else _NUMBERS.get(count)
    if n is not None and ago_unit.lower() == "day":
        return f"on {_day(today - timedelta(days=n))}"
    return f"{m.group(0)[: -len(' ago')]} before {_day(today)}"


def dated(clause: str, when: datetime | None) -> str:
    """The clause with its relative dates ("yesterday", "last month", "two weeks ago") written as the
    dates they mean at `when` (the message's time), so that the fact still says when once it is old."""
    if when is None:
        return clause
    today = timezone.localtime(when).date() if timezone.is_aware(when) else when.date()
    return _RELATIVE.sub(lambda m: _resolve(m, today), clause)


# --- What a clause states -------------------------------------------------------------------------

_QUESTION_START = re.compile(
    r"^(?:what|how|why|when|where|who|whom|whose|which|do|does|did|are|is|can|could|would|will|should|have|has|"
    r"shall|may|am|isn't|aren't|don't|didn't)\b",
    re.I,
)
_HEDGE_MORE = re.compile(
    r"\b(?:i wish|i hope you|i bet|i'd|i would|i wonder|i feel like|i mean|i suppose|i assume|i doubt|"
    r"i can't wait|i'm not sure|i was thinking|i've been thinking|someday|one day|wanna|kinda|sorta)\b",
    re.I,
)
_YOU = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|u|ur|ya)\b", re.I)
_KIN_WORDS = {
    "gf": "girlfriend",
    "bf": "boyfriend",
    "mom": "mother",
    "mum": "mother",
    "mommy": "mother",
    "dad": "father",
    "daddy": "father",
    "hubby": "husband",
    "bff": "best friend",
    "bro": "brother",
    "sis": "sister",
    "grandma": "grandmother",
    "grandpa": "grandfather",
    "kiddos": "kids",
}
_KIN = (
    "girlfriend|boyfriend|wife|husband|partner|fiancee?|spouse|sister|brother|sibling|mother|father|parents?|"
    "son|daughter|kids?|children|child|cousin|aunt|uncle|niece|nephew|grandmother|grandfather|grandparents?|"
    "friend|best friend|colleague|coworker|co-worker|boss|manager|mentor|neighbou?r|roommate|dog|cat|puppy|kitten"
)
_KIN_NORMAL = re.compile(r"\b(my|our)\s+(" + "|".join(_KIN_WORDS) + r")\b", re.I)
_KIN_NAMED = re.compile(
    r"\b[Mm]y\s+((?:best|old|close|little|big|younger|older|twin|new)\s+)?(" + _KIN + r")\s*,?\s+"
    r"(?:named\s+|called\s+)?([A-Z][a-z][\w-]*)\b(?!['’]s\s+(?:" + _KIN + "))"
)
_KIN_PAIR = re.compile(r"^my\s+((?:best\s+)?(?:" + _KIN + r"))\s+and\s+i\b", re.I)
_NOT_NAMES = frozenset({"and", "i", "is", "was", "the", "but", "so", "who", "that", "has", "had", "just"})

# The first verb after "I" (adverbs skipped) decides whether the clause states something about the speaker.
_ADVERBS = frozenset(
    "just recently finally also really actually still now always usually often sometimes even already "
    "currently totally definitely absolutely mostly mainly basically officially literally".split()
)
_PRESENT = {
    "have": "has",
    "do": "does",
    "go": "goes",
    "am": "is",
    "'m": "is",
    "'ve": "has",
    "'ll": "will",
    "will": "will",
    "can": "can",
}
_PRESENT_VERBS = frozenset(
    """play volunteer work live love like enjoy prefer hate dislike collect teach study run own practice practise
    write paint cook bake draw sing dance swim hike garden knit sew ski surf climb speak drive ride train coach
    mentor manage lead attend visit watch listen use keep raise grow make take want plan adore spend read
    go have do avoid support celebrate care""".split()
)
_PAST_VERBS = frozenset(
    """went visited started joined adopted bought got made painted ran took signed attended finished completed
    launched opened won lost met read wrote learned learnt tried baked built planted volunteered played traveled
    travelled moved graduated received created organized organised hosted gave found watched saw had did quit
    left married hiked camped cooked drew designed published released performed sang danced studied passed
    applied decided celebrated spent used picked raised donated lived worked taught ate drove flew swam climbed
    sold fixed repaired restored rescued enrolled registered became turned began kicked switched earned landed
    reached visited explored bought upgraded renovated redecorated welcomed gathered shared told chose""".split()
)
_NOT_FACT_VERBS = frozenset(
    """wondered guessed figured supposed meant assumed noticed realized realised agreed appreciated needed hoped
    wished imagined expected believed thought felt knew forgot remembered loved liked enjoyed missed heard
    wanted""".split()
)
# "I'm ..." states something lasting only with these words after it (not "I'm so happy for you").
_BEING = re.compile(
    r"^(?:a|an|allergic|vegetarian|vegan|married|engaged|pregnant|retired|single|divorced|from|originally|"
    r"based|located|keen|into|interested|passionate|part|member|learning|training|working|planning|going to|"
    r"gonna|studying|taking|volunteering|saving|starting|writing|reading|building|hosting|organi[sz]ing|teaching|"
    r"running|playing|painting|preparing|applying|looking forward|getting|moving|attending|joining|"
    r"practi[cs]ing|trying to|doing|raising|expecting|dating|\d+ years old|\w+ years old)\b",
    re.I,
)
# "My X is / has / just ...": a statement about something of the speaker's.
_MY_VERB = re.compile(
    r"^(?:my|our)\s+(?:[\w'-]+\s+){0,4}?(?:is|are|was|were|has|had|have|lives|lived|works|worked|loves|likes|"
    r"enjoys|plays|turned|turns|got|gets|just|started|starts|passed|moved|graduated|made|took|came|comes|went|"
    r"gave|bought|taught|won|finished|opened|became|'s)\b",
    re.I,
)
_EMPTY = frozenset(
    """it that this these those them so much too very really a an the lot one thing things stuff all to of and
    for with at in on again more just also as well there here way now then yet though totally definitely always
    never ever some any out up about was is be been being how what time great good fun nice amazing awesome cool
    wonderful blast day today yesterday same idea sure right exactly lol haha doing fine okay ok well""".split()
)
_MAX_CLAUSE = 300
# Words that carry no subject of their own: a clause made of them only is encouragement, not a fact
# ("I'll keep going", "I'm gonna make it happen", "I'm trying to stay up").
_FILLER = frozenset(
    """get got started start going keep make happen check try trying stay push pushing go do see look wait hang
    figure know think excited happy glad ready able gonna want like love reach dreams dream hard best positive
    impact everything something anything nothing more forward lots plenty fan big huge total""".split()
)
# After "I've" / "I have": what was done or owned, not "I've heard" or "I've got to".
_PARTICIPLES = frozenset(
    """been started adopted taken begun done made gone written grown become bought had got gotten joined finished
    completed learned learnt volunteered worked lived played tried visited traveled travelled collected painted won
    lost met built created owned raised taught studied moved saved run ridden flown swum climbed found received
    earned launched opened published signed registered enrolled always never also just recently""".split()
)
_WILL = frozenset("be start visit travel go move attend join take run host begin graduate fly head launch open".split())
_RULE_VERBS = frozenset("prefer like love enjoy hate dislike avoid use using".split())


def _third(words: str) -> str:
    """The rest of a first-person clause in the third person ("my kids" → "their kids")."""
    return _PRONOUN_REST.sub(lambda m: _PRONOUN_MAP[m.group(0).lower()], words)


_PRONOUN_MAP = {
    "my": "their",
    "our": "their",
    "me": "them",
    "us": "them",
    "mine": "theirs",
    "ours": "theirs",
    "myself": "themself",
    "ourselves": "themselves",
    "i'm": "they are",
    "i've": "they have",
    "i'll": "they will",
    "i": "they",
    "we": "they",
    "we're": "they are",
    "we've": "they have",
}
_PRONOUN_REST = re.compile(r"\b(?:i'm|i've|i'll|we're|we've|my|our|me|us|mine|ours|myself|ourselves|i|we)\b", re.I)


def _conjugate(word: str) -> str:
    low = word.lower()
    if low in _PRESENT:
        return _PRESENT[low]
    if low.endswith(("s", "sh", "ch", "x", "o")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in _EMPTY and w not in _PRONOUN_MAP]


@dataclass(frozen=True)
class _Said:
    """One statement drawn from a clause, about the speaker (`SELF_NAME` in its relations)."""

    content: str  # with "{S}" / "{P}" standing for the speaker and their possessive
    category: str
    kind: str
    slot: str | None
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationDraft, ...] = ()
    confidence: float = 0.9


_HEADS = {
    "i'm": ("is", False),
    "we're": ("are", True),
    "i've": ("has", False),
    "we've": ("have", True),
    "i'll": ("will", False),
    "we'll": ("will", True),
    "i": (None, False),
    "we": (None, True),
}
_VAGUE = frozenset("it that this them these those something one".split())
_VAGUE_OBJECT = re.compile(r"^[Ii]\s+(?:(?:really|just|also|totally|absolutely)\s+)?\w+\s+(\w+)")
_COUNTED = re.compile(r"(?:an?|two|three|four|five|\d+|some|many|several|a few)\b")
_ERRAND = re.compile(r"(?:got|have|has|had)\s+to\b|need", re.I)
_LIKING = re.compile(r"(?:loves?|likes?|enjoys?|prefers?|hates?|dislikes?|adores?)\b")


def _possessive(words: list[str], clause: str) -> _Said | None:
    """ "My sister lives in Porto" → "{P} sister lives in Porto"."""
    if not _MY_VERB.match(clause) or len(_content_words(" ".join(words[1:]))) < 2:
        return None
    kind = "preference" if re.search(r"\bfavou?rite\b", clause, re.I) else "fact"
    return _Said("{P} " + _third(" ".join(words[1:])) + ".", "personal", kind, None, confidence=0.8)


def _verb(verb: str | None, rest: list[str], plural: bool) -> tuple[str, list[str]] | None:
    """The clause's verb in the third person and the words after it; None when the verb states nothing
    lasting ("I wonder", "I'm so happy for you")."""
    if verb is None:
        first = rest[0].lower()
        known = first in ("am", "was", "have", "had", "will", "'m") or first in _PAST_VERBS
        if not known and (
            first in _NOT_FACT_VERBS or not (first in _PRESENT_VERBS or len(first) > 4 and first.endswith("ed"))
        ):
            return None
        if first == "am":
            verb = "are" if plural else "is"
        elif first == "have" and not plural:
            verb = "has"
        elif first in _PRESENT_VERBS and not plural and first not in _PAST_VERBS:
            verb = _conjugate(first)
        else:
            verb = first
        rest = rest[1:]
    if verb in ("is", "are", "was") and (not rest or not _BEING.match(" ".join(rest))):
        return None
    return verb, rest


def _substantial(verb: str, rest: list[str]) -> bool:
    """Whether what follows the verb names something ("a pottery class"), not only filler ("keep going")."""
    tail = " ".join(rest)
    first = rest[0].lower() if rest else ""
    if not [w for w in _content_words(tail) if w not in _FILLER]:
        return False
    if verb in ("has", "have") and first not in _PARTICIPLES and first not in _PAST_VERBS and not _COUNTED.match(first):
        return False  # "I've heard", "I have to": not something done or owned
    if verb == "will" and first not in _WILL:
        return False
    if first in _VAGUE and len([w for w in _content_words(tail) if w not in _FILLER]) < 3:
        return False  # "I love it and ...", "I got them a new friend": about something said before
    return not _ERRAND.match(f"{verb} {tail}")


def _generic(clause: str) -> _Said | None:
    """A first-person clause about the speaker's life, in the third person ("I went to a pottery class on
    7 May 2023" → "{S} went to a pottery class on 7 May 2023"); None for what states nothing lasting."""
    words = clause.rstrip(" .!").split()
    if _YOU.search(clause) or len(clause) > _MAX_CLAUSE or not words:
        return None
    head = words[0].lower()
    if head in ("my", "our"):
        return _possessive(words, clause)
    if head not in _HEADS:
        return None
    verb, plural = _HEADS[head]
    rest, adverbs = words[1:], []
    while rest and rest[0].lower() in _ADVERBS:
        adverbs.append(rest.pop(0))
    found = _verb(verb, rest, plural) if rest else None
    if found is None:
        return None
    verb, rest = found
    while verb in ("is", "are") and rest and rest[0].lower() in _ADVERBS:
        adverbs.append(rest.pop(0))
    if not rest or not _substantial(verb, rest) or (verb in ("is", "are") and not _BEING.match(" ".join(rest))):
        return None
    subject = "{S} and others" if plural else "{S}"
    text = " ".join([subject, *adverbs, verb, _third(" ".join(rest))])
    return _Said(text + ".", "preference" if _LIKING.match(verb) else "personal", "fact", None, confidence=0.8)


_PLACE_NAME = r"([A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*){0,3})"
_ORG_NAME = r"([A-Z][\w&'’.-]*(?:\s+(?:[A-Z0-9][\w&'’.-]*|of|&))*)"
_TITLE = r"(?:an?\s+)?([a-z][\w-]*(?:\s+(?!(?:at|for|in|with|since|and|but|so|now|there|here)\b)[a-z][\w-]*){0,3})"
_MOVE = re.compile(
    r"^[Ii](?:'ve| have)?\s+(?:(?:just|recently|finally|also|officially)\s+)*(?:moved|relocated)\s+(?:back\s+)?"
    rf"(?:from\s+{_PLACE_NAME}\s+)?to\s+{_PLACE_NAME}(.*)$"
)
_EMPLOYER = re.compile(
    r"^[Ii](?:'m| am)?\s+(?:(?:now|currently|still|also|just)\s+)*(?:work|working|employed)\s+"
    r"(?:(?:remotely|full-time|part-time|full time|part time)\s+)?(?:at|for)\s+"
    r"(?:(?:a|an)\s+[\w-]+(?:\s+[\w-]+)?\s+(?:called|named)\s+)?" + _ORG_NAME + r"(?:\s+as\s+" + _TITLE + r")?"
    r"(?=$|[\s,.!])(.*)$"
)
_WORK_AS = re.compile(
    r"^[Ii](?:'ve| have)?(?:'m| am)?\s+(?:(?:now|currently|still|also|just)\s+)*(?:work|working|been working)\s+as\s+"
    + _TITLE
    + r"(?:\s+(?:at|for)\s+"
    + _ORG_NAME
    + r")?(?=$|[\s,.!])(.*)$"
)
_ROLE_AT = re.compile(
    r"^[Ii](?:'m| am)\s+(?:now\s+)?(?:an?\s+)"
    + r"([a-z][\w-]*(?:\s+[a-z][\w-]*){0,3}?)"
    + r"\s+(?:at|for)\s+"
    + _ORG_NAME
    + r"(.*)$"
)
_HIRED = re.compile(
    r"^[Ii]\s+(?:(?:just|finally|recently)\s+)*(?:got\s+(?:a\s+(?:new\s+)?job|hired)|joined|started\s+(?:a\s+(?:new\s+)?job\s+)?)"
    r"\s*(?:at|with)?\s*" + _ORG_NAME + r"(?:\s+as\s+" + _TITLE + r")?(?=$|[\s,.!])(.*)$"
)
_PROMOTED = re.compile(
    r"^[Ii]\s+(?:(?:just|finally|recently)\s+)*got\s+promoted\s+to\s+"
    + _TITLE
    + r"(?:\s+(?:at|in)\s+"
    + _ORG_NAME
    + r")?(?=$|[\s,.!])(.*)$"
)
_USED_TO_LIVE = re.compile(r"^[Ii]\s+used\s+to\s+live\s+in\s+" + _PLACE_NAME + r"(.*)$")
_TITLE_STOP = frozenset({"a", "an", "the", "and", "for", "at", "in", "now", "there", "here", "lot", "bit"})


def _name_of(captured: str | None) -> str | None:
    """A captured name without the sentence's full stop ("Acme Robotics." → "Acme Robotics"; "St." stays)."""
    if not captured:
        return captured
    return captured if re.search(r"\b(?:St|Dr|Mr|Mrs|Ms|Jr|Sr|Inc|Co|Ltd)\.$", captured) else captured.rstrip(".")


def _mention(name: str, kind: str) -> EntityMention:
    return EntityMention(name, kind, "object")


def _employer(org: str, rest: str = "") -> _Said:
    return _Said(
        "{S} works at " + org + ".",
        "personal",
        "fact",
        "work.employer",
        (_USER, _mention(org, "company")),
        (RelationDraft(SELF_NAME, "works_at", org),),
    )


def _role(title: str | None) -> _Said | None:
    title = (title or "").strip()
    words = title.split()
    if not words or words[-1].lower() in _TITLE_STOP or words[0].lower() in _TITLE_STOP:
        return None
    article = "an" if title[:1].lower() in "aeiou" else "a"
    return _Said("{S} works as " + f"{article} {title}.", "personal", "fact", "work.role", (_USER,))


def _structured(clause: str) -> list[_Said]:
    """The statements that fill a slot of the speaker (where they live, work, what as) or a relation of
    the graph, several from one clause ("I now work at Globex as a product manager": employer and role)."""
    out: list[_Said] = []
    m = _MOVE.match(clause)
    if m and _not_a_tool([m.group(2)]):
        old, new, rest = _name_of(m.group(1)), _name_of(m.group(2)), m.group(3).rstrip(" .!")
        out.append(
            _Said(
                "{S} lives in " + new + ".",
                "personal",
                "fact",
                "user.location",
                (_USER, _mention(new, "place")),
                (RelationDraft(SELF_NAME, "lives_in", new),),
            )
        )
        mentions = [_USER, _mention(new, "place")]
        relations = [RelationDraft(SELF_NAME, "moved_to", new)]
        if old:
            mentions.append(_mention(old, "place"))
            relations.append(RelationDraft(SELF_NAME, "moved_from", old))
            # Said as its own statement, so that the write path's judge meets an old "lives in <old>" stored
            # without the location key (an agent's save) and flags or supersedes it; a keyed one the new
            # value of the slot has replaced already.
            out.append(_Said("{S} no longer lives in " + old + ".", "personal", "fact", None, (_USER,)))
        moved = "{S} moved " + (f"from {old} " if old else "") + f"to {new}{_third(rest)}."
        out.append(_Said(moved, "personal", "fact", None, tuple(mentions), tuple(relations)))
        return out
    m = _USED_TO_LIVE.match(clause)
    if m:
        place = _name_of(m.group(1))
        return [
            _Said(
                "{S} used to live in " + place + _third(m.group(2).rstrip(" .!")) + ".",
                "personal",
                "fact",
                None,
                (_USER, _mention(place, "place")),
                (RelationDraft(SELF_NAME, "lived_in", place),),
            )
        ]
    for pattern, org_at, title_at in (
        (_EMPLOYER, 1, 2),
        (_WORK_AS, 2, 1),
        (_ROLE_AT, 2, 1),
        (_HIRED, 1, 2),
        (_PROMOTED, 2, 1),
    ):
        m = pattern.match(clause)
        if not m:
            continue
        org, title = _name_of(m.group(org_at)), m.group(title_at)
        if org and org.split()[0].lower() not in _NOT_NAMES:
            out.append(_employer(org))
        role = _role(title)
        if role is not None:
            out.append(role)
        if out:
            return out
    return out


def _kinship(clause: str) -> list[_Said]:
    """ "my sister Ana" → "Ana is {P} sister." (sister_of); "my gf and I ..." → "{S} has a girlfriend."."""
    out = []
    for m in _KIN_NAMED.finditer(clause):
        adjective, kin, name = (m.group(1) or "").strip().lower(), m.group(2).lower(), m.group(3)
        if name.lower() in _NOT_NAMES:
            continue
        label = f"{adjective} {kin}".strip()
        if kin in ("dog", "cat", "puppy", "kitten"):
            out.append(_Said("{S} has a " + f"{label} named {name}.", "personal", "fact", None))
            continue
        relation = RelationDraft(name, f"{kin.replace(' ', '_').replace('-', '_')}_of", SELF_NAME)
        out.append(
            _Said(
                f"{name} is " + "{P} " + f"{label}.",
                "personal",
                "fact",
                None,
                (EntityMention(name, "person", "subject"), EntityMention(SELF_NAME, "person", "object")),
                (relation,),
            )
        )
    m = _KIN_PAIR.match(clause)
    if m:
        kin = m.group(1).lower()
        article = "an" if kin[:1] in "aeiou" else "a"
        out.append(_Said("{S} has " + f"{article} {kin}.", "personal", "fact", None))
    return out


_FAN = re.compile(r"\bfan\b", re.I)
_NOT_A_TITLE = re.compile(
    r"\b(?:fan|mix|bit|lot|little|big|huge|total|real|great|good|bad|person|kind|type|sort)\b", re.I
)


def _role_fact(old: tuple) -> tuple | None:
    """ "I'm a nurse" fills the role slot; "I'm a huge fan of jazz" is a liking, not a job title (no slot),
    and "I'm a huge fan" without what of says nothing."""
    content, category, kind, slot, graph = old
    value = content.removeprefix("The user is a ").removeprefix("The user is an ").rstrip(".")
    if _FAN.search(value) and " of " not in value:
        return None
    if _NOT_A_TITLE.search(value) or len(value.split()) > 4:
        return content, "preference" if _FAN.search(value) else category, kind, None, graph
    return old


def _normal(clause: str) -> str:
    """Chat words as the product writes them ("my gf" → "my girlfriend")."""
    return _KIN_NORMAL.sub(lambda m: f"{m.group(1)} {_KIN_WORDS[m.group(2).lower()]}", clause)


def _unfront(clause: str) -> str:
    """ "Last Saturday I ran a 10k" → "I ran a 10k last Saturday": the clause opens with its subject."""
    m = _FRONT_TIME.match(clause)
    if m is None:
        return clause
    when = re.sub(r"^just\s+", "", m.group(1), flags=re.I)
    return f"{clause[m.end() :].rstrip(' .!')} {when[:1].lower()}{when[1:]}"


def _templated(clause: str) -> _Said | None:
    """The statement of the first rules-v1 template that fits (name, timezone, tools, preferences...)."""
    old = _clause_fact(clause)
    if old is None or _YOU.search(clause):
        return None  # "I love your turtles": about the other person
    said = [w for w in _content_words(clause) if w not in _RULE_VERBS and w not in _FILLER]
    if not said:
        return None  # "I really enjoy it": a reaction, no object
    vague = _VAGUE_OBJECT.match(clause)
    if vague and vague.group(1).lower() in _VAGUE and len(said) < 3:
        return None  # "I love it and ...": about something said before
    if old[3] == "work.role":
        old = _role_fact(old)
    if old is None or old[0].startswith("The user visited"):
        return None  # a visit is said with its details (and date) by the generic rule
    content, category, kind, slot, (entities, relations) = old
    content = content.replace("The user's ", "{P} ", 1).replace("The user ", "{S} ", 1)
    return _Said(content, category, kind, slot, entities, relations)


def _said(clause: str) -> list[_Said]:
    """Every statement of one first-person clause (nothing for a question, a hedge or a redaction)."""
    if clause.endswith("?") or _QUESTION_START.match(clause) or "[REDACTED:" in clause:
        return []
    if _HEDGE.search(clause) or _HEDGE_MORE.search(clause):
        return []
    found = _kinship(clause)
    pair = _KIN_PAIR.match(clause)
    if pair:  # "my girlfriend and I adopted a puppy": what they did, said of the speaker and them
        clause = "we" + clause[pair.end() :]
    structured = _structured(clause)
    if structured:
        return found + structured
    templated = _templated(clause)
    if templated is not None:
        return [*found, templated]
    generic = _generic(clause)
    if generic is not None:
        if pair:
            generic = _Said(
                generic.content.replace("{S} and others", "{S} and their " + pair.group(1).lower()),
                generic.category,
                generic.kind,
                None,
                confidence=generic.confidence,
            )
        found.append(generic)
    return found


def extract(messages: list[tuple[int, str, str]], *, times: dict[int, datetime] | None = None) -> list[RuleFact]:
    """Facts from (index, role, text) triples: the user's own first-person statements, about "the user";
    a line that names its speaker ("Ana: I moved to Porto", a two-person chat relayed by an agent) gives
    facts about that speaker, whatever its role; an unnamed assistant's words give none (its suggestions
    are not the user's life). `times` ({index: the message's time}) turns "yesterday" into a date."""
    found: list[RuleFact] = []
    seen: set[str] = set()
    for index, role, text in messages:
        speaker, words = speaker_of(text)
        if speaker in _AGENT_LABELS:
            continue
        if speaker in _USER_LABELS:
            speaker, role = None, "user"
        if role not in ("user", "assistant") or (speaker is None and role != "user"):
            continue
        when = (times or {}).get(index)
        for clause in statements(_CAPTION.sub("", words)):
            clause = _normal(dated(_unfront(clause), when))
            for said in _said(clause):
                fact = _as_fact(said, speaker, index)
                if fact.content.lower() in seen:
                    continue
                seen.add(fact.content.lower())
                found.append(fact)
    return found


def _as_fact(said: _Said, speaker: str | None, index: int) -> RuleFact:
    """The statement with its speaker named: "the user", or the speaker of a named line."""
    subject, possessive = (speaker, f"{speaker}'s") if speaker else ("the user", "the user's")
    content = said.content.replace("{S}", subject).replace("{P}", possessive)
    content = content[:1].upper() + content[1:]
    content = re.sub(r"\s+([.,!])", r"\1", re.sub(r"\s+", " ", content)).strip()
    slot = said.slot
    entities, relations = said.entities, said.relations
    if speaker:
        slug = re.sub(r"[^a-z0-9]+", "_", speaker.lower()).strip("_")
        slot = f"person.{slug}.{slot.split('.', 1)[-1]}" if slot and slot != "user.name" else None
        me = EntityMention(speaker, "person", "subject")
        entities = tuple(EntityMention(speaker, "person", e.role) if e.name == SELF_NAME else e for e in entities) or (
            (me,) if relations else ()
        )
        relations = tuple(
            RelationDraft(
                speaker if r.subject == SELF_NAME else r.subject, r.type, speaker if r.object == SELF_NAME else r.object
            )
            for r in relations
        )
    return RuleFact(
        content=content,
        category=said.category,
        kind=said.kind,
        confidence=said.confidence,
        key=slot,
        message_index=index,
        entities=entities,
        relations=relations,
    )


def _clause_fact(clause: str) -> tuple[str, str, str, str | None, tuple] | None:
    """(content, category, kind, key, (entities, relations)) of the first rule that matches `clause`;
    None when none matches or the words it captured are too thin to state a fact."""
    for pattern, category, kind, key, template in _RULES:
        m = pattern.match(clause)
        if not m:
            continue
        groups = [g for g in m.groups() if g is not None]
        if not groups:
            return None
        guard = _GUARDS.get(template)
        if guard is not None and not guard(groups):
            continue  # not this rule's kind of statement ("I moved to Neovim"): the next rule may fit
        if template.startswith("The user {0}s"):
            groups[0] = _VERB_S.get(groups[0].lower(), groups[0].lower())[:-1]
        values = [_third_person(g) for g in groups]
        if template == "The user switched to {1}." and len(values) == 1:
            values = ["", values[0]]
        if any(len(v) < 2 for v in values if v) and template.count("{") == 1:
            return None
        content = re.sub(r"\s+", " ", template.format(*values)).strip()
        slot = key.format(*[v.lower() for v in values]) if key and "{" in key else key
        return content, category, kind, slot, _graph(template, values)
    return None


# What a rule's fact says about the graph: template → (relation type, the object's type, its value's
# index), the relation going from the user (the fact's subject) to the object. Preferences take the
# relation type from their verb ({0}).
_RELATIONS: dict[str, tuple[str, str, int]] = {
    "The user moved to {0}.": ("moved_to", "place", 0),
    "The user visited {0}.": ("visited", "place", 0),
    "The user writes code in {0}.": ("uses", "tool", 0),
    "The user is a {0}.": ("works_at", "company", 1),  # "I'm a data engineer at Acme"
    "The user is based in {0}.": ("lives_in", "place", 0),
    "The user lives in {0}.": ("lives_in", "place", 0),
    "The user is from {0}.": ("is_from", "place", 0),
    "The user works at {0}.": ("works_at", "company", 0),
    "The user manages {0}.": ("manages", "", 0),
    "The user works on {0}.": ("works_on", "project", 0),
    "The user {0}s {1}.": ("{0}s", "", 1),
    "The user's favourite {0} is {1}.": ("prefers", "", 1),
    "The user uses {0}.": ("uses", "tool", 0),
    "The user switched to {1}.": ("uses", "tool", 1),
    "The user's {0} is {1}.": ("uses", "tool", 1),
}


def _not_a_tool(groups: list[str]) -> bool:
    return kind_of(_WHEN.sub("", groups[-1]).strip(" .,;:!")) != "tool"


def _a_name(groups: list[str]) -> bool:
    return groups[0][:1].isupper()


# Rules that hold only for some values: the template → whether the captured groups fit it.
_GUARDS = {"The user moved to {0}.": _not_a_tool, "The user visited {0}.": _a_name}
_WHEN = re.compile(r"\s+(?:now|these days|nowadays|currently|at the moment|right now|today)$", re.I)
_MAX_NAME_WORDS = 5
_NAME_RUN = re.compile(r"[^\W\d_][\w'’&.+#-]*(?:\s+(?:[A-Z0-9][\w'’&.+#-]*|(?:of|de|la|and)\b))*")
_USER = EntityMention(SELF_NAME, "person", "subject")


def _entity_name(value: str) -> str | None:
    """The name in a captured value ("Globex now" → "Globex"); None for a phrase rather than a name."""
    name = _WHEN.sub("", value).strip(" .,;:!\"'")
    if name[:1].isupper():  # a name, then words about it: "Berlin last year" → "Berlin"
        name = _NAME_RUN.match(name).group()
        name = re.sub(r"(?:\s+(?:of|de|la|and))+$", "", name)
    return name if 2 <= len(name) and len(name.split()) <= _MAX_NAME_WORDS else None


def clause_graph(clause: str) -> tuple[tuple[EntityMention, ...], tuple[RelationDraft, ...]]:
    """The entities and relations of one first-person clause by the rules above ("I work at Acme":
    the user works_at Acme); nothing for a question, a hedge or a clause no rule matches."""
    if clause.endswith("?") or _HEDGE.search(clause) or "[REDACTED:" in clause:
        return (), ()
    structured = _structured(clause)  # a move, an employer and a role: what extraction links, drawn alike
    if structured:
        mentions = {(m.name, m.type, m.role): m for s in structured for m in s.entities}
        relations = {r: None for s in structured for r in s.relations}
        return tuple(mentions.values()), tuple(relations)
    fact = _clause_fact(clause)
    return fact[4] if fact is not None else ((), ())


def _graph(template: str, values: list[str]) -> tuple[tuple[EntityMention, ...], tuple[RelationDraft, ...]]:
    if template == "The user's name is {0}.":
        return (EntityMention(values[0], "person", "subject", aliases=(SELF_NAME,)),), ()
    if template not in _RELATIONS:
        return (_USER,), ()
    relation, object_type, at = _RELATIONS[template]
    name = _entity_name(values[at]) if at < len(values) and values[at] else None
    if name is None:
        return (_USER,), ()
    kind = relation.format(*values) if "{" in relation else relation
    if not object_type:  # the rule does not say what the object is: its name and neighbours may
        object_type = kind_of(name, "")
    return (_USER, EntityMention(name, object_type, "object")), (RelationDraft(SELF_NAME, kind, name),)


_SUCCESS = re.compile(
    r"\b(thanks?|thank you|that worked|it works|works now|worked|fixed|solved|perfect|great|"
    r"done|resolved|all good|awesome)\b",
    re.I,
)
_FAILURE = re.compile(
    r"\b(still (?:fails|failing|broken|doesn't work|not working)|doesn't work|didn't work|"
    r"not working|give up|gave up|no luck|still an error|won't work|failed)\b",
    re.I,
)


def outcome_of(messages: list[tuple[str, str]]) -> str:
    """success / failure / unknown from the last user turns (an offline, honest guess)."""
    user_turns = [text for role, text in messages if role == "user"][-2:]
    tail = " ".join(user_turns)
    if _FAILURE.search(tail):
        return "failure"
    if _SUCCESS.search(tail):
        return "success"
    return "unknown"


def _first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence that says something (greetings such as "Hi!" are skipped)."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    sentence = next((s for s in sentences if len(s.split()) >= 3), sentences[0] if sentences else "")
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


WITHHELD_QUOTE = "(a message that reads as instructions to a model, not quoted)"


def _quote(text: str) -> str:
    """A user's sentence quoted into the summary, which context blocks serve to agents: one that reads as
    instructions to a model (the poisoning guard) is described, never quoted."""

    if verdict(text).flagged:
        return WITHHELD_QUOTE
    sentence = _first_sentence(text)
    return WITHHELD_QUOTE if verdict(sentence).flagged else f"“{sentence}”"


def summarize(messages: list[tuple[str, str]]) -> str:
    """An extractive summary: what the user opened with, what else they said, how it ended."""
    user = [text for role, text in messages if role == "user" and text.strip()]
    if not user:
        return f"{len(messages)} messages without user turns."
    parts = [f"The user opened with: {_quote(user[0])}"]
    if len(user) > 2:
        parts.append(f"Along the way: {_quote(user[len(user) // 2])}")
    if len(user) > 1:
        parts.append(f"Last user turn: {_quote(user[-1])}")
    parts.append(f"({len(messages)} messages.)")
    return " ".join(parts)
