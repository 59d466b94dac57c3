"""What kind of thing a drawn name is (person, organisation, place, tool or language, project, event),
offline: by the words around it in the fact ("lives in X", "works at X", "uses X"), by the name's own
last word ("Acme Robotics", "Lake Tahoe", "Pride Parade"), and by a short list of well-known places and
tools. What none of these says stays `other`: a wrong type misleads more than a missing one.

Shared kinds (places, organisations, tools, events) are things many memory users mention; services.entities
resolves them to one tenant entity, which holds the name only (no user's facts, aliases or relations)."""

from __future__ import annotations

import re

from memory_admin.models.entities import EntityType, fold_name

# Kinds whose entity is the tenant's (one "Zed", one "Lisbon"), not one per memory user.
SHARED_KINDS = frozenset({EntityType.PLACE, EntityType.TOOL, EntityType.COMPANY, EntityType.EVENT})

_PLACES = frozenset(
    """lisbon berlin toronto nairobi osaka madrid oslo austin melbourne warsaw paris london rome tokyo kyoto
    chicago seattle boston portland denver miami dublin amsterdam vienna prague budapest munich hamburg
    zurich geneva barcelona milan naples athens istanbul cairo lagos johannesburg mumbai delhi bangalore
    singapore shanghai beijing seoul sydney auckland vancouver montreal lima bogota stockholm helsinki
    copenhagen edinburgh glasgow manchester brussels minneapolis california texas florida oregon minnesota
    colorado hawaii alaska canada mexico brazil argentina england scotland ireland wales france germany
    spain portugal italy greece sweden norway finland denmark poland netherlands belgium austria
    switzerland turkey egypt kenya nigeria india china japan korea australia russia ukraine europe asia
    africa america usa uk thailand vietnam indonesia philippines peru chile iceland""".split()
) | {
    "new york",
    "san francisco",
    "los angeles",
    "hong kong",
    "cape town",
    "mexico city",
    "buenos aires",
    "sao paulo",
    "new zealand",
    "pacific northwest",
    "east coast",
    "west coast",
}
_TOOLS = frozenset(
    """python typescript javascript rust kotlin elixir java golang ruby php swift scala haskell c++ c#
    sql postgres postgresql mysql sqlite redis kafka docker kubernetes terraform ansible git github gitlab
    jira confluence slack notion figma excel vim neovim emacs helix zed vs code vscode jetbrains jetbrains ides
    intellij pycharm xcode linux ubuntu macos windows android ios react vue angular django flask rails
    pytorch tensorflow tiktok instagram youtube spotify netflix photoshop lightroom chatgpt""".split()
) | {"vs code", "jetbrains ides", "visual studio code", "google docs", "google sheets"}
_ORG_TAIL = frozenset(
    """inc inc. ltd llc corp corporation company co group labs lab robotics health analytics logistics
    systems technologies software bank university college school academy institute foundation agency
    studio studios club association society hospital clinic council ministry department airlines
    motors partners capital ventures media games""".split()
)
_PLACE_TAIL = frozenset(
    """city street st avenue road park lake river mountain mountains beach falls county island islands
    valley coast bay canyon forest desert village town state province""".split()
)
_EVENT_TAIL = frozenset(
    """festival conference summit marathon parade cup championship championships olympics expo
    hackathon concert fair gala wedding tournament retreat meetup convention""".split()
)
_EVENTS = frozenset({"christmas", "thanksgiving", "halloween", "easter", "new year", "pride", "diwali", "ramadan"})

# The word (or two) right before a name that says what it is.
_CUES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:lives?|living|based|born|grew up|stays?|stayed|located)\s+(?:in|near)\s+$", re.I), "place"),
    (
        re.compile(
            r"\b(?:moved|moving|relocated|trip|flew|flight|travell?ed|road trip|vacation|holiday)\s+to\s+$", re.I
        ),
        "place",
    ),
    (re.compile(r"\b(?:visit|visited|visiting|in)\s+$", re.I), "place?"),
    (re.compile(r"\b(?:works?|working|worked|job|intern(?:ing|ed)?|employed)\s+(?:at|for)\s+$", re.I), "company"),
    (re.compile(r"\b(?:joined|hired by|left|quit)\s+$", re.I), "company?"),
    (re.compile(r"\b(?:uses?|using|used|code in|written in|switched to|editor is|language is|app)\s+$", re.I), "tool"),
    (re.compile(r"\b(?:working on|the project|project)\s+$", re.I), "project"),
    (
        re.compile(
            r"\b(?:friend|sister|brother|mom|mum|mother|dad|father|wife|husband|partner|son|daughter|"
            r"boss|colleague|coworker|cousin|aunt|uncle|grandma|grandpa|neighbou?r|mentor|"
            r"hey|hi|hello|thanks|thank you|dear|told|asked|met)\s*,?\s+$",
            re.I,
        ),
        "person",
    ),
)


def kind_of(name: str, before: str = "") -> str:
    """The kind of `name` by its own words and the text `before` it in the fact; `other` when unsure."""
    name = re.sub(r"^(?:the|a|an)\s+", "", name, flags=re.I)
    key = fold_name(name)
    words = key.split()
    if not words:
        return EntityType.OTHER
    if key in _TOOLS:
        return EntityType.TOOL
    if not name[:1].isupper():
        return EntityType.OTHER  # a phrase ("running their own studio"), not a name
    if key in _EVENTS or words[-1] in _EVENT_TAIL:
        return EntityType.EVENT
    if len(words) > 1 and words[-1] in _ORG_TAIL:
        return EntityType.COMPANY
    if key in _PLACES:
        return EntityType.PLACE
    if len(words) > 1 and words[-1] in _PLACE_TAIL:
        return EntityType.PLACE
    return _by_cue(words, before[-40:])


def _by_cue(words: list[str], tail: str) -> str:
    for pattern, kind in _CUES:
        if pattern.search(tail):
            if kind.endswith("?"):  # a weak cue: only for a name of one or two words, never a title
                return kind[:-1] if len(words) <= 2 else EntityType.OTHER
            return kind
    return EntityType.OTHER
