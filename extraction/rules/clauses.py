"""What one first-person clause states: moves, employers and roles, relatives, templated statements and
the generic "I <verb> ..." fallback, each as a `Said` in the third person (`said_in`), and the entities and
relations of a clause for the offline entity drawing (`clause_graph`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from extraction.rules.sentences import FRONT_TIME
from extraction.rules.templates import HEDGE, USER_SUBJECT, clause_fact, not_a_tool
from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft

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
class Said:
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


def _possessive(words: list[str], clause: str) -> Said | None:
    """ "My sister lives in Porto" → "{P} sister lives in Porto"."""
    if not _MY_VERB.match(clause) or len(_content_words(" ".join(words[1:]))) < 2:
        return None
    kind = "preference" if re.search(r"\bfavou?rite\b", clause, re.I) else "fact"
    return Said("{P} " + _third(" ".join(words[1:])) + ".", "personal", kind, None, confidence=0.8)


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


def _generic(clause: str) -> Said | None:
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
    return Said(text + ".", "preference" if _LIKING.match(verb) else "personal", "fact", None, confidence=0.8)


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


def _employer(org: str, rest: str = "") -> Said:
    return Said(
        "{S} works at " + org + ".",
        "personal",
        "fact",
        "work.employer",
        (USER_SUBJECT, _mention(org, "company")),
        (RelationDraft(SELF_NAME, "works_at", org),),
    )


def _role(title: str | None) -> Said | None:
    title = (title or "").strip()
    words = title.split()
    if not words or words[-1].lower() in _TITLE_STOP or words[0].lower() in _TITLE_STOP:
        return None
    article = "an" if title[:1].lower() in "aeiou" else "a"
    return Said("{S} works as " + f"{article} {title}.", "personal", "fact", "work.role", (USER_SUBJECT,))


def _structured(clause: str) -> list[Said]:
    """The statements that fill a slot of the speaker (where they live, work, what as) or a relation of
    the graph, several from one clause ("I now work at Globex as a product manager": employer and role)."""
    out: list[Said] = []
    m = _MOVE.match(clause)
    if m and not_a_tool([m.group(2)]):
        old, new, rest = _name_of(m.group(1)), _name_of(m.group(2)), m.group(3).rstrip(" .!")
        out.append(
            Said(
                "{S} lives in " + new + ".",
                "personal",
                "fact",
                "user.location",
                (USER_SUBJECT, _mention(new, "place")),
                (RelationDraft(SELF_NAME, "lives_in", new),),
            )
        )
        mentions = [USER_SUBJECT, _mention(new, "place")]
        relations = [RelationDraft(SELF_NAME, "moved_to", new)]
        if old:
            mentions.append(_mention(old, "place"))
            relations.append(RelationDraft(SELF_NAME, "moved_from", old))
            # Said as its own statement, so that the write path's judge meets an old "lives in <old>" stored
            # without the location key (an agent's save) and flags or supersedes it; a keyed one the new
            # value of the slot has replaced already.
            out.append(Said("{S} no longer lives in " + old + ".", "personal", "fact", None, (USER_SUBJECT,)))
        moved = "{S} moved " + (f"from {old} " if old else "") + f"to {new}{_third(rest)}."
        out.append(Said(moved, "personal", "fact", None, tuple(mentions), tuple(relations)))
        return out
    m = _USED_TO_LIVE.match(clause)
    if m:
        place = _name_of(m.group(1))
        return [
            Said(
                "{S} used to live in " + place + _third(m.group(2).rstrip(" .!")) + ".",
                "personal",
                "fact",
                None,
                (USER_SUBJECT, _mention(place, "place")),
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


def _kinship(clause: str) -> list[Said]:
    """ "my sister Ana" → "Ana is {P} sister." (sister_of); "my gf and I ..." → "{S} has a girlfriend."."""
    out = []
    for m in _KIN_NAMED.finditer(clause):
        adjective, kin, name = (m.group(1) or "").strip().lower(), m.group(2).lower(), m.group(3)
        if name.lower() in _NOT_NAMES:
            continue
        label = f"{adjective} {kin}".strip()
        if kin in ("dog", "cat", "puppy", "kitten"):
            out.append(Said("{S} has a " + f"{label} named {name}.", "personal", "fact", None))
            continue
        relation = RelationDraft(name, f"{kin.replace(' ', '_').replace('-', '_')}_of", SELF_NAME)
        out.append(
            Said(
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
        out.append(Said("{S} has " + f"{article} {kin}.", "personal", "fact", None))
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


def normal_clause(clause: str) -> str:
    """Chat words as the product writes them ("my gf" → "my girlfriend")."""
    return _KIN_NORMAL.sub(lambda m: f"{m.group(1)} {_KIN_WORDS[m.group(2).lower()]}", clause)


def unfront(clause: str) -> str:
    """ "Last Saturday I ran a 10k" → "I ran a 10k last Saturday": the clause opens with its subject."""
    m = FRONT_TIME.match(clause)
    if m is None:
        return clause
    when = re.sub(r"^just\s+", "", m.group(1), flags=re.I)
    return f"{clause[m.end() :].rstrip(' .!')} {when[:1].lower()}{when[1:]}"


def _templated(clause: str) -> Said | None:
    """The statement of the first rules-v1 template that fits (name, timezone, tools, preferences...)."""
    old = clause_fact(clause)
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
    return Said(content, category, kind, slot, entities, relations)


def said_in(clause: str) -> list[Said]:
    """Every statement of one first-person clause (nothing for a question, a hedge or a redaction)."""
    if clause.endswith("?") or _QUESTION_START.match(clause) or "[REDACTED:" in clause:
        return []
    if HEDGE.search(clause) or _HEDGE_MORE.search(clause):
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
            generic = Said(
                generic.content.replace("{S} and others", "{S} and their " + pair.group(1).lower()),
                generic.category,
                generic.kind,
                None,
                confidence=generic.confidence,
            )
        found.append(generic)
    return found


def clause_graph(clause: str) -> tuple[tuple[EntityMention, ...], tuple[RelationDraft, ...]]:
    """The entities and relations of one first-person clause ("I work at Acme": the user works_at
    Acme), by the structured statements and the templates (`rules.templates`); nothing for a question, a
    hedge or a clause no rule matches."""
    if clause.endswith("?") or HEDGE.search(clause) or "[REDACTED:" in clause:
        return (), ()
    structured = _structured(clause)  # a move, an employer and a role: what extraction links, drawn alike
    if structured:
        mentions = {(m.name, m.type, m.role): m for s in structured for m in s.entities}
        relations = {r: None for s in structured for r in s.relations}
        return tuple(mentions.values()), tuple(relations)
    fact = clause_fact(clause)
    return fact[4] if fact is not None else ((), ())
