"""Secret detection: catch rate on the secret corpus and false positives on natural conversation.

    PYTHONPATH=. python bench/secret_detection.py                   # the scanner of this checkout
    PYTHONPATH=. python bench/secret_detection.py --tree /tmp/before  # another checkout's scanner
    PYTHONPATH=. python bench/secret_detection.py --plugins         # each detect-secrets plugin alone

Corpus: tests/security/corpus.py, every secret kind x every disguise (`cases()`, contact PII left out),
plus the credential spellings and the formats of the maintained rule set (`format_cases()`). A case is
caught when the scan finds a secret in it. Conversation: the dev LoCoMo turns
(/work/shared/eval/locomo-dev/locomo_dev_turns.jsonl); a turn is blocked when the scan finds a secret
in it (secrets are always blocked, whatever the tenant's PII policy). Contact PII found in the turns
is counted apart: what happens to it is the tenant's policy.

`--plugins` runs each detect-secrets plugin on its own, line by line on the normalised form (the way
the scanner runs the ones it keeps), to show what each would add and what it would cost in false
positives: the evidence for the choice in `pii.RULE_SET_PLUGINS`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = Path("/work/shared/eval/locomo-dev/locomo_dev_turns.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default="")
    parser.add_argument("--plugins", action="store_true")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    sys.path.insert(1, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    os.environ.setdefault("DATABASE_URL", "postgresql://nobody:nothing@127.0.0.1:1/none")  # parsed, never used
    import django

    django.setup()
    import memory_admin
    from memory_admin.services.pii import find
    from tests.security.corpus import CONTACT, cases, format_cases

    print(f"# scanner of {Path(memory_admin.__file__).resolve().parent.parent}")
    corpus = [(c.name, c.text) for c in cases() if c.name.split("/")[0] not in CONTACT]
    corpus += [(c.name, c.text) for c in format_cases()]
    turns = [json.loads(line)["text"] for line in LOCOMO.read_text().splitlines() if line.strip()]

    def secret_found(text: str) -> bool:
        return any(f.is_secret for f in find(text))

    _report("scanner", corpus, turns, secret_found)
    contact = sum(1 for t in turns if any(not f.is_secret for f in find(t)))
    print(f"  turns with contact PII (handled by the tenant policy, not counted above): {contact}")
    if args.plugins:
        _plugins(corpus, turns)


def _report(name: str, corpus, turns, detect) -> None:
    groups: dict[str, list[bool]] = {}
    missed = []
    for case_name, text in corpus:
        caught = detect(text)
        group = case_name.split("/")[0] if case_name.split("/")[0] in ("credentials", "rule_set") else "kinds"
        groups.setdefault(group, []).append(caught)
        if not caught:
            missed.append(case_name)
    blocked = [t for t in turns if detect(t)]
    total = sum(sum(v) for v in groups.values())
    n = sum(len(v) for v in groups.values())
    parts = ", ".join(f"{g} {sum(v)}/{len(v)}" for g, v in groups.items())
    print(f"{name}: caught {total}/{n} = {total / n:.1%} ({parts}); blocked turns {len(blocked)}/{len(turns)}")
    plain_missed = [m for m in missed if m.endswith("/plain")]
    if plain_missed:
        print("  missed (plain spelling): " + ", ".join(m.rsplit("/", 1)[0] for m in plain_missed))
    for t in blocked[:5]:
        print(f"  blocked turn: {t[:100]!r}")


def _plugins(corpus, turns) -> None:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    from memory_admin.textnorm import screen_form

    for secret_type, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        try:
            plugin = cls()
        except TypeError:
            continue  # the entropy plugins need a limit: evaluated through the scanner's context rule

        def detect(text: str, plugin=plugin) -> bool:
            return any(any(True for _ in plugin.analyze_string(line)) for line in screen_form(text).text.split("\n"))

        _report(f"detect-secrets {secret_type}", corpus, turns, detect)


if __name__ == "__main__":
    main()
