"""The secret corpus: every kind of secret and contact PII, disguised every way a reader still sees
through. Shared by the scanner's unit tests and the end-to-end corpus test (HTTP, pg_dump, logs).

Values are assembled at run time so that no literal secret sits in the repository as-is.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from urllib.parse import unquote

from memory_admin.textnorm import fold

# kind -> (the value, the sentence it is planted in, its distinctive core)
SECRETS: dict[str, tuple[str, str, str]] = {
    "openai_key": (
        "sk-" + "proj-Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s",
        "note for Alice: {} ok",
        "Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s",
    ),
    "openai_legacy": (
        "sk-" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef3Hi6Kl9No2Qr5Tu",
        "note for Alice: {} ok",
        "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef3Hi6Kl9No2Qr5Tu",
    ),
    "github_token": (
        "ghp_" + "R2d2C3p0Xw1ngY0d4Lu8eSkyw4lkerHan5oL0",
        "note for Alice: {} ok",
        "R2d2C3p0Xw1ngY0d4Lu8eSkyw4lkerHan5oL0",
    ),
    "aws_access_key": ("AKIA" + "QX7Z2LMN4PRT8VWY", "note for Alice: {} ok", "QX7Z2LMN4PRT8VWY"),
    "aws_secret_key": (
        "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ3kP9x2Lm",
        "note for Alice: {} ok",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYzQ3kP9x2Lm",
    ),
    "slack_token": (
        "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp",
        "note for Alice: {} ok",
        "0987654321AbCdEfGhIjKlMnOp",
    ),
    "stripe_live": ("sk_" + "live_4eC39HqLyjWDarjtT1zdp7dc", "note for Alice: {} ok", "4eC39HqLyjWDarjtT1zdp7dc"),
    "stripe_restricted": ("rk_" + "live_51Hx9LmQp2Rt7Vw3Yz8Bc4Df", "note for Alice: {} ok", "51Hx9LmQp2Rt7Vw3Yz8Bc4Df"),
    "stripe_test": ("sk_" + "test_7Lm2Qp9Rt4Vw1Yz6Bc3Df8Gh", "note for Alice: {} ok", "7Lm2Qp9Rt4Vw1Yz6Bc3Df8Gh"),
    "google_api_key": (
        "AIza" + "SyD4x9Qm2Lp7Rt3Vw8Yz1Bc6Df0Gh5Jk9Lm",
        "note for Alice: {} ok",
        "SyD4x9Qm2Lp7Rt3Vw8Yz1Bc6Df0Gh5Jk9Lm",
    ),
    "jwt": (
        "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJhbGljZSIsImFkbWluIjp0cnVlfQ" + ".Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMw",
        "note for Alice: {} ok",
        "eyJzdWIiOiJhbGljZSIsImFkbWluIjp0cnVlfQ",
    ),
    "private_key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzq9PlantedKeyMaterialLine0001\n"
        "Zm9vYmFyYmF6cXV4UGxhbnRlZEtleU1hdGVyaWFs\n-----END RSA PRIVATE KEY-----",
        "note for Alice:\n{}\nok",
        "PlantedKeyMaterialLine0001",
    ),
    "card_number": ("4539 1488 0343 6467", "note for Alice: {} ok", "4539148803436467"),
    "email": ("alice.secret.mail@example.org", "note for Alice: {} ok", "alicesecretmail"),
    "phone": ("+44 20 7946 0958", "call Alice on {} ok", "2079460958"),
    "phone_us": ("(415) 555-0123", "call Alice on {} ok", "4155550123"),
    "ssn": ("078-05-1120", "Alice SSN {} ok", "078051120"),
}
# The scanner's kind for each corpus entry.
KIND = {
    "openai_legacy": "openai_key",
    "stripe_live": "stripe_key",
    "stripe_restricted": "stripe_key",
    "stripe_test": "stripe_key",
    "ssn": "national_id",
    "phone_us": "phone",
}
PREFIXED = {
    "openai_key",
    "openai_legacy",
    "github_token",
    "aws_access_key",
    "slack_token",
    "stripe_live",
    "stripe_restricted",
    "stripe_test",
    "google_api_key",
}
CONTACT = {"email", "phone", "phone_us", "ssn"}

_CYRILLIC = str.maketrans(
    {
        "a": "а",
        "e": "е",
        "o": "о",
        "p": "р",
        "c": "с",
        "x": "х",
        "s": "ѕ",
        "i": "і",
        "A": "А",
        "E": "Е",
        "K": "К",
        "M": "М",
        "O": "О",
        "P": "Р",
        "T": "Т",
        "X": "Х",
        "B": "В",
        "H": "Н",
    }
)


_ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def _fullwidth(v: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else "\u3000" if c == " " else c for c in v)


def _every(v: str, ch: str, step: int = 5) -> str:
    return ch.join(v[i : i + step] for i in range(0, len(v), step))


def _mid(v: str, ch: str) -> str:
    """`ch` inserted inside the token body (after its prefix), twice."""
    n = len(v)
    a, b = n // 2, (3 * n) // 4
    return v[:a] + ch + v[a:b] + ch + v[b:]


def _prefix_case(v: str) -> str | None:
    m = re.match(r"(sk-proj-|sk-|ghp_|AKIA|xoxb-|sk_live_|rk_live_|sk_test_|AIza)(.*)", v, re.S)
    if not m:
        return None
    prefix, body = m.groups()
    if prefix == "AKIA":
        return (prefix + body).lower()
    return prefix.swapcase() + body


EVASIONS = {
    "plain": lambda k, v: v,
    "zero_width": lambda k, v: _every(v, "\u200b"),
    "word_joiner_soft_hyphen": lambda k, v: _mid(v, "\u2060\u00ad"),
    "cyrillic": lambda k, v: v.translate(_CYRILLIC),
    "fullwidth": lambda k, v: _fullwidth(v),
    "glued": lambda k, v: ("KEY_" + v + "_prod") if k not in CONTACT | {"card_number"} else None,
    "newline_split": lambda k, v: (
        _mid(v, "\n") if k in PREFIXED | {"jwt"} else (v.replace(" ", "\n") if k == "card_number" else None)
    ),
    "space_split": lambda k, v: _mid(v, " ") if k in PREFIXED | {"jwt"} else None,
    "nbsp_double_space": lambda k, v: v.replace(" ", "\u00a0 ") if " " in v else None,
    "slash_groups": lambda k, v: v.replace(" ", "/") if k == "card_number" else None,
    "no_separators": lambda k, v: re.sub(r"[\s()+-]", "", v) if k in ("card_number", "phone_us", "ssn") else None,
    "e164": lambda k, v: (
        "+" + "1" + re.sub(r"\D", "", v) if k == "phone_us" else ("+" + re.sub(r"\D", "", v) if k == "phone" else None)
    ),
    "percent_escapes": lambda k, v: (
        v.replace("-", "%2D").replace("_", "%5F").replace("@", "%40") if re.search(r"[-_@]", v) else None
    ),
    "html_entities": lambda k, v: (
        v.replace("-", "&#45;").replace("_", "&#x5f;").replace("@", "&commat;") if re.search(r"[-_@]", v) else None
    ),
    "prefix_case": lambda k, v: _prefix_case(v) if k in PREFIXED else None,
    "base64": lambda k, v: base64.b64encode(f"token: {v}".encode()).decode() if k not in CONTACT else None,
    "fullwidth_at": lambda k, v: v.replace("@", "\uff20") if k == "email" else None,
    "at_dot_words": lambda k, v: v.replace("@", " [at] ").replace(".org", " [dot] org") if k == "email" else None,
    "other_script_digits": lambda k, v: (
        v.translate(_ARABIC_INDIC) if k in ("card_number", "phone", "phone_us", "ssn") else None
    ),
    "cyrillic_fullwidth_zero_width": lambda k, v: _every(_fullwidth(v.translate(_CYRILLIC)), "\u200c", 7),
}


# Bare digit strings count as a phone or an SSN only next to a word that says so ("call", "SSN"): the
# sentence of the case has that word, an identifier made of the bare value alone does not.
CONTEXT_BOUND = {"phone_us/no_separators", "ssn/no_separators"}


@dataclass(frozen=True)
class Case:
    name: str  # "<kind>/<evasion>"
    kind: str  # the scanner's kind
    value: str  # the disguised value
    text: str  # the value planted in a sentence
    needles: tuple[str, ...]  # canonical fragments that must never be stored or logged


def canon(text: str) -> str:
    """What is compared: escapes decoded, folded, only letters, digits and @ kept (so a value
    disguised or re-spaced in storage still matches its needle)."""
    text = text.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r")
    return re.sub(r"[^0-9A-Za-z@]", "", fold(html.unescape(unquote(fold(text)))))


def _needles(core: str, value: str, evasion: str) -> tuple[str, ...]:
    c = canon(core)
    out = [c] if c.isdigit() else [c[i : i + 12] for i in range(0, max(1, len(c) - 11), 4)]
    if evasion == "base64":
        payload = canon(value)
        out += [payload[i : i + 16] for i in range(8, max(9, len(payload) - 15), 8)]
    return tuple(out)


def cases() -> list[Case]:
    out = []
    for key, (value, template, core) in SECRETS.items():
        for evasion, make in EVASIONS.items():
            disguised = make(key, value)
            if disguised is None or (evasion != "plain" and disguised == value):
                continue
            out.append(
                Case(
                    f"{key}/{evasion}",
                    KIND.get(key, key),
                    disguised,
                    template.format(disguised),
                    _needles(core, disguised, evasion),
                )
            )
    return out


# Benign texts that look a little like secrets or PII and must pass untouched.
BENIGN = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the build",
    "request id 550e8400-e29b-41d4-a716-446655440000 failed once",
    "the meeting moved to 2024-01-15 at 14:30, then to 15/01/2024",
    "order number 4155550123 shipped; invoice 20240115-0042",
    "order #1234567890123456 was refunded",
    "ISBN 978-3-16-148410-0 and ISBN 0-306-40615-2 are on her shelf",
    "she runs version 1.2.3-beta.4 of the client, build 2024.01.15.1234",
    "task-management-system-overview is the doc she edits most",
    "her risk-adjusted-returns-2024-report is due Friday",
    "ThisIsMyVeryLongCamelCaseIdentifier2024x is her variable name",
    "getUserAccountSettingsByIdForTenant2024v is the function she wrote",
    "the sha256 is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1ba2b18edd15ea0f0c8f1e9f2a",
    "pi is 3.14159265358979 and e is 2.71828182845904",
    "the Slovakia trip costs 1200 EUR; Alice asked for room 1207",
    "She keeps 12 spaces of indentation and  two  spaces after periods.",
    "Скажи привет команде в понедельник",  # Cyrillic prose
    "ｆｕｌｌｗｉｄｔｈ text is used in her Japanese notes: 東京 ２０２４",
    "Alice is at example.org for the conference",
    "the sku is AB-1234-CD and the zip code is 94107",
    "Her key idea: ask-me-anything sessions every Friday",
    "the base64 of hello world is aGVsbG8gd29ybGQ= (a test vector)",
    "the bug is tracked as JIRA-48213 and PR #5521",
    "/api/v1/users/Alice2024/facts/Recent is the route she calls",
]


# ---------------------------------------------------------------------------------------------------
# Credentials as they are written in files people paste (issue 27): the AWS credentials file, env files,
# JSON and YAML, quoted values; and the formats of the maintained rule set (detect-secrets' plugins) that
# the hand-written list did not know. Each is (name, the text, its distinctive core).

_AWS_SECRET = "Zx9" + "qL2mN8pR4tV6wY1bC3dF5gH7jK0sE2uI4oA6rT8y"[:37]
_HEX32 = "3f7a9c1e5b2d4f6a" + "8c0e2b4d6f1a3c5e"


def _credential_texts() -> list[tuple[str, str, str]]:
    v = _AWS_SECRET
    key_id = "AKIA" + "QX7Z2LMN4PRT8VWY"
    return [
        ("credentials_file_no_spaces", f"aws_secret_access_key={v}", v),
        ("credentials_file_spaces", f"aws_secret_access_key = {v}", v),
        (
            "credentials_file_profile",
            f"[default]\naws_access_key_id={key_id}\naws_secret_access_key={v}\nregion=eu-west-1",
            v,
        ),
        ("env_upper", f"AWS_SECRET_ACCESS_KEY={v}", v),
        ("env_export_double_quotes", f'export AWS_SECRET_ACCESS_KEY="{v}"', v),
        ("env_single_quotes", f"AWS_SECRET_ACCESS_KEY='{v}'", v),
        ("json", f'{{"aws_secret_access_key": "{v}", "region": "eu-west-1"}}', v),
        ("json_cli_output", f'{{"AccessKeyId": "{key_id}", "SecretAccessKey": "{v}"}}', v),
        ("yaml", f"aws:\n  secret_access_key: {v}\n  region: eu-west-1", v),
        ("yaml_quoted", f"aws_secret_access_key: '{v}'", v),
        ("terraform", f'secret_key = "{v}"', v),
        ("python_kwarg", f"boto3.client('s3', aws_secret_access_key='{v}')", v),
        ("url_parameter", f"https://example.org/upload?AWSSecretKey={v}&x=1", v),
    ]


def _rule_set_texts() -> list[tuple[str, str, str]]:
    b64_88 = ("Qm9ndXNBenVyZVN0b3JhZ2VLZXk" + "xMjM0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo") * 2
    azure = b64_88[:86] + "=="
    gitlab = "glpat-" + "x7Kp2Qm9Lr4Tz8Wb1Nc5"
    sendgrid = "SG." + "aB3dE6fG9hJ2kL5mN8pQ1r" + "." + "sT4uV7wX0yZ3aB6cD9eF2gH5jK8mN1pQ4rS7tU0vW3x"
    npm = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    pypi = "pypi-AgEIcHlwaS5vcmc" + "CJGQ4ZjM1YjEyLWE3ZGMtNGM0Yi1hNjYxLTk2ZGYxYzM3NzU3NwACKlsxLFsicHJvamVjdCJdXQ"
    discord = "MTA4" + "NzY1NDMyMTA5ODc2NTQz.GhT2xK.aB3dE6fG9hJ2kL5mN8pQ1rS4tU7"
    telegram = "5432109876" + ":AAF" + "k2Lm9Qp4Rt7Vw1Xz5Bc8Dn3Fg6Hj0Km2Ns"
    square = "sq0csp-" + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY3zA6bC9dE2f"
    return [
        (
            "azure_storage",
            f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={azure};EndpointSuffix=x",
            azure,
        ),
        ("gitlab_token", f"her gitlab token is {gitlab}", gitlab[6:]),
        ("twilio_account_sid", f"twilio sid AC{_HEX32} for the sms", _HEX32),
        ("twilio_api_key", f"twilio key SK{_HEX32[::-1]} for the sms", _HEX32[::-1]),
        ("sendgrid", f"mail via {sendgrid}", sendgrid[3:25]),
        ("npm_token", f"//registry.npmjs.org/:_authToken={npm}", npm[4:]),
        ("pypi_token", f"password = {pypi}", pypi[20:60]),
        ("discord_bot_token", f"bot token {discord}", discord[:24]),
        ("mailchimp", f"mailchimp key {_HEX32}-us12", _HEX32),
        ("basic_auth_url", "db at https://admin:Sup3rS3cretPw9@db.example.com/prod", "Sup3rS3cretPw9"),
        ("telegram_bot_token", f"telegram {telegram}", telegram[11:]),
        ("square_oauth", f"square secret {square}", square[7:]),
        ("password_assignment", 'password = "Hunter2Blue!Sky"', "Hunter2Blue!Sky"),
        ("password_json", '{"user": "alice", "password": "Hunter2Blue!Sky"}', "Hunter2Blue!Sky"),
        ("password_yaml", "db:\n  password: Hunter2Blue!Sky", "Hunter2Blue!Sky"),
        ("putty_key", "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 14", "PuTTY-User-Key-File"),
    ]


@dataclass(frozen=True)
class FormatCase:
    name: str  # "<group>/<format>/<evasion>"
    text: str
    needle: str  # canonical core that must never be stored


FORMAT_EVASIONS = ("plain", "zero_width", "fullwidth", "cyrillic", "html_entities", "base64")


def format_cases() -> list[FormatCase]:
    out = []
    for group, texts in (("credentials", _credential_texts()), ("rule_set", _rule_set_texts())):
        for name, text, core in texts:
            for evasion in FORMAT_EVASIONS:
                disguised = EVASIONS[evasion]("format", text)
                if disguised is None or (evasion != "plain" and disguised == text):
                    continue
                out.append(FormatCase(f"{group}/{name}/{evasion}", f"note for Alice:\n{disguised}\nok", canon(core)))
    return out
