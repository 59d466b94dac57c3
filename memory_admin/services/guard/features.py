"""What reads as an instruction to a model: each family of injection as a few weighted features, the
dampers (reported speech, mentions) and the imperative form that adds to a directive's score."""

from __future__ import annotations

import re

from memory_admin.services.guard.patterns import Feature, _Pattern, _rx

_VERB = (
    r"(?:ignore|disregard|forget|override|overrule|bypass|circumvent|skip|discard|drop|abandon|neglect|"
    r"dismiss|scrap|ditch|overlook|nullify|set\s+aside|throw\s+(?:out|away)|"
    r"pay\s+no\s+(?:attention|heed|mind)\s+to|take\s+no\s+notice\s+of|never\s+mind|"
    r"(?:do\s+not|don'?t|no\s+longer|never)\s+(?:follow|obey|heed|listen\s+to|apply|comply\s+with)|"
    r"stop\s+(?:following|obeying|applying)|disobey)"
)
_QUAL = (
    r"(?:previous(?:ly)?|prior|above|earlier|preceding|foregoing|former|original|initial|existing|default|"
    r"all|any|every|your|its|system'?s?|developer|safety|current|given|these|those|whatever)"
)
_TARGET = (
    r"(?:instructions?|guidance|guidelines?|rules?|directions?|directives?|prompts?|commands?|orders?|"
    r"constraints?|restrictions?|programming|polic(?:y|ies)|safeguards?|filters?|filtering|guardrails?|"
    r"context|messages?|training|limitations?|boundaries|ethics|configuration|system\s+prompt|"
    r"content\s+polic(?:y|ies)|what\s+(?:you\s+were|you've\s+been|you\s+have\s+been|i)\s+(?:told|said|given))"
)
_AFTER = (
    r"(?:above|before|earlier|previously|so\s+far|from\s+before|you\s+(?:were|have\s+been)\s+given|"
    r"given\s+(?:to\s+you\s+)?(?:earlier|before|above|previously)|"
    r"(?:from|in|of)\s+(?:your|the)\s+(?:setup|system|configuration|prompt|developers?|training|creators?))"
)
# Words and the separators between them, each read whole (possessive) and a word at most 40 characters
# long: a separator that could also be read as part of a word (`-`, `'`) let the engine try every split
# of a long run of dashes, and an unbounded word read `ignore-ignore-…` to its end from every verb.
_SEP = r"\W++"
_WORD_SEP = r"[\w'-]{1,40}+[^\w'-]++"  # a word of at most 40 characters, then what follows it
_GAP = rf"(?:{_WORD_SEP}){{0,4}}?"
_AI = r"(?:ai|a\.i\.|assistant|model|llm|language\s+model|chatbot|chat\s*bot|agent|bot|gpt|chatgpt|claude|copilot)s?"
_SEND = (
    r"(?:send|post|upload|forward|e-?mail|mail|transmit|exfiltrate|leak|copy|submit|paste|share|sync|bcc|"
    r"relay|pipe|dump|export|include|embed|append|report)"
)
_SENSITIVE = (
    r"(?:conversations?|chat\s*(?:log|history|logs)|history|transcripts?|messages|memor(?:y|ies)|"
    r"notebooks?|secrets?|credentials?|passwords?|api\s*keys?|tokens|keys|private\s+\w+|personal\s+\w+|"
    r"user\s+data|user'?s\s+\w+|all\s+(?:data|facts|information|users)|card\s+numbers?|stored\s+\w+|"
    r"system\s+prompt|other\s+(?:users|tenants))"
)
_DEST = (
    r"(?:https?://|\b[\w.+-]+@[\w-]+\.[\w.]+|webhook|endpoint|this\s+(?:url|address|link|server)|"
    r"the\s+following\s+(?:url|address)|external\s+server|attacker)"
)
_REPLY = r"(?:reply|replies|response|responses|answer|answers|message|messages|output)"

FEATURES: tuple[Feature, ...] = (
    # --- Overriding earlier instructions -------------------------------------------------------------
    Feature(
        "override",
        "an instruction to ignore earlier instructions",
        0.8,
        _rx(
            rf"\b{_VERB}{_SEP}{_GAP}\b{_QUAL}{_SEP}(?:{_WORD_SEP}){{0,3}}?{_TARGET}\b"
            rf"|\b{_VERB}\W++(?:the\s+|my\s+)?{_TARGET}\s++{_AFTER}"
        ),
        directive=True,
    ),
    Feature(
        "override_weak",
        "an instruction to ignore instructions or rules",
        0.5,
        _rx(rf"\b{_VERB}{_SEP}(?:{_WORD_SEP}){{0,3}}?{_TARGET}\b"),
        directive=True,
    ),
    Feature(
        "forget_all",
        "an instruction to forget what the model was told",
        0.9,
        _rx(
            r"\b(?:forget|erase|wipe|clear)\s+(?:everything|all(?:\s+of\s+it)?|anything)\s+(?:you\s+(?:were|have\s+been|"
            r"know|learned|were\s+told)|you've\s+been|above|before|previous(?:ly)?|prior|so\s+far|earlier)"
        ),
        directive=True,
    ),
    Feature(
        "void",
        "a claim that earlier instructions are void",
        1.0,
        _rx(
            r"\b(?:previous|prior|earlier|above|preceding|your|all\s+(?:previous|prior)|the\s+(?:above|preceding|"
            r"previous|prior|original))\s+(?:instructions|rules|directives|guidelines|guidance|orders|prompts?|"
            r"directions|constraints)\s+(?:you\s+(?:got|received|were\s+given|have)\s+(?:\w+\s+)?)?"
            r"(?:(?:are|were|is|was|have\s+been|has\s+been)\s+(?:now\s+|all\s+)?(?:void|cancel+ed|null|"
            r"obsolete|outdated|revoked|superseded|invalid|wrong|lifted|suspended|replaced|changed|fake|a\s+mistake|"
            r"an\s+error|a\s+test|no\s+longer\s+(?:valid|apply|applicable|in\s+effect))|(?:no\s+longer|do\s+not|"
            r"don't)\s+apply|have\s+changed)"
        ),
    ),
    Feature(
        "precedence",
        "a claim that this memory overrides the model's instructions",
        1.0,
        _rx(
            r"\bthis\s+(?:memory|note|entry|message|text|instruction)\s+(?:takes\s+precedence|overrides|supersedes|"
            r"has\s+(?:priority|precedence)|comes\s+first)|\b(?:whatever|what)\s+(?:the\s+system|your\s+(?:developers?|"
            r"instructions|prompt|creators?))\s+(?:told|tells|says|said)\s+you"
        ),
    ),
    Feature(
        "above_was_test",
        "a claim that what came before was a test",
        0.8,
        _rx(
            r"\b(?:everything|all|the\s+text|anything)\s+(?:above|before|prior)(?:\s+this(?:\s+line|\s+point)?)?\s+"
            r"(?:was|is)\s+(?:just\s+)?(?:a\s+test|fake|false|wrong|void|irrelevant|a\s+lie|outdated)"
        ),
    ),
    Feature(
        "real_task",
        "a claim of a real or new task for the model",
        0.8,
        _rx(
            r"\b(?:your\s+(?:real|true|actual|new|updated|revised|secret|hidden)|(?:the|my)\s+(?:real|true|actual|"
            r"secret|hidden))\s+(?:instructions?|task|goal|job|mission|objective|purpose|orders|directives?|role|"
            r"rules|prompt|name|persona|identity)\b"
        ),
    ),
    Feature(
        "priority",
        "a claim of priority over other instructions",
        0.6,
        _rx(
            r"\b(?:highest|top|first)\s+priority\s+(?:instruction|directive|order|command)|\babove\s+all\s+(?:previous|"
            r"prior|other)\s+(?:ones|instructions|rules)"
        ),
    ),
    # --- Addressing the model ------------------------------------------------------------------------
    Feature("addressee", "words addressed to an AI model", 0.2, _rx(rf"\b{_AI}\b")),
    Feature(
        "addressed",
        "a message addressed to an AI reading the memory",
        0.7,
        _rx(
            rf"\b(?:note|message|instructions?|memo|reminder)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+|every\s+)?{_AI}\b"
            rf"|\b(?:to|for)\s+(?:the\s+|any\s+|all\s+|every\s+)?{_AI}\s+(?:reading|processing|seeing|retrieving)\b"
            rf"|\b{_AI}\s+(?:reading|processing|seeing|retrieving)\s+this\b"
            rf"|\bwhen\s+(?:an?\s+|the\s+|any\s+)?{_AI}\s+(?:reads|sees|processes|encounters|retrieves|finds|loads)\s+this"
            rf"|\bif\s+you\s+are\s+(?:an?\s+)?(?:ai|llm|large\s+language\s+model|language\s+model|assistant|agent|bot|"
            rf"chatbot)\b"
            rf"|^[ \t]*(?:ai|assistant|agent|model)\s*,"
            rf"|^[ \t]*ai\s*:"
        ),
    ),
    Feature(
        "command_you",
        "an order given to the model",
        0.6,
        _rx(r"\b(?:i|we)\s+(?:hereby\s+)?(?:order|command|instruct|authori[sz]e|direct|require)\s+you\b"),
    ),
    # --- Roles and authority -------------------------------------------------------------------------
    Feature(
        "role_tag_start",
        "a system or administrator tag",
        1.0,
        _rx(
            r"^[ \t]*[\[(<{【]\s*(?:system|sys|developer|admin(?:istrator)?|root|operator|instructions?|inst|override|"
            r"priority)(?:\s+(?:message|msg|note|notice|prompt|override|update|instruction|mode))?\s*[\])>}】]"
        ),
    ),
    Feature(
        "role_tag",
        "a system or administrator tag",
        0.7,
        _rx(
            r"[\[(<{【]\s*(?:system|sys|developer|admin(?:istrator)?|root|instructions?)(?:\s+(?:message|msg|note|"
            r"notice|prompt|override|update|instruction|mode))?\s*[\])>}】]"
        ),
    ),
    Feature(
        "role_line",
        "a line claiming to come from the system",
        0.6,
        _rx(r"^[ \t]*(?:#+\s*)?(?:system|developer|admin(?:istrator)?|root|operator|instructions?)\s*[:\-–—]"),
    ),
    Feature(
        "role_line_strong",
        "a system or developer message",
        1.0,
        _rx(
            r"^[ \t]*(?:#+\s*)?(?:system|developer|admin|operator)\s+(?:message|prompt|note|notice|override|update|"
            r"instructions?)\s*[:\-–—]|\b(?:system|admin|priority|security|emergency|developer)\s+override\b"
        ),
    ),
    Feature("role_caps", "a SYSTEM: label", 0.8, _rx(r"\b(?:SYSTEM|DEVELOPER|ADMIN|INSTRUCTIONS?)\s*:"), view="cased"),
    Feature(
        "role_heading",
        "a chat-template heading (### Instruction:)",
        1.0,
        _rx(r"^[ \t]*#{2,}\s*(?:instruction|system|response|human|assistant|user|input)\s*:\s*"),
    ),
    Feature(
        "role_heading_bare",
        "a chat-template heading",
        0.6,
        _rx(r"^[ \t]*#{2,}\s*(?:instruction|system|response|human|assistant)\s*$"),
    ),
    Feature(
        "authority",
        "a claim to be the model's developer or administrator",
        0.7,
        _rx(
            r"\b(?:as|i\s+am|i'm|this\s+is|message\s+from)\s+(?:your|the)\s+(?:developers?|creators?|makers?|"
            r"programmers?|system\s+administrator|administrators?|admin|owners?|operators?|supervisors?|designers?|"
            r"trainers?)\b|\bthis\s+is\s+(?:openai|anthropic|google\s+deepmind)\b"
        ),
    ),
    Feature(
        "authority_speaking",
        "a message in the name of the model's operators",
        0.5,
        _rx(
            r"\b(?:this\s+is|here\s+is)\s+(?:your|the)\s+(?:\w+\s+)?(?:developers?|administrators?|admin|creators?|"
            r"operators?|system)\s+(?:speaking|team)\b"
        ),
    ),
    Feature(
        "new_instructions",
        "a block of new instructions",
        1.0,
        _rx(r"\bnew\s+(?:system\s+)?(?:instructions?|directives?|orders|prompt|task|objective|goal)\s*[:\-–—]"),
    ),
    Feature(
        "new_policy",
        "an announced new policy or rule",
        0.5,
        _rx(r"\bnew\s+(?:polic(?:y|ies)|rules?|guidelines?)\s*[:\-–—]"),
    ),
    Feature(
        "updated_instructions",
        "updated or hidden instructions",
        0.6,
        _rx(
            r"\b(?:updated|revised|real|actual|true|secret|hidden|override|priority|emergency)\s+(?:system\s+)?"
            r"(?:instructions?|prompt|directives?)\b"
        ),
    ),
    Feature(
        "updated_instructions_block",
        "a block of updated instructions",
        1.0,
        _rx(
            r"\b(?:updated|revised|real|actual|override|priority|emergency)\s+(?:system\s+)?"
            r"(?:instructions?|prompt|directives?)\s*[:\-–—]"
        ),
    ),
    # --- Chat templates and tool calls -------------------------------------------------------------
    Feature(
        "template_token",
        "a chat-template token",
        0.6,
        _rx(
            r"<\|\s*[a-z_]{2,30}\s*\|>|\[/?\s*inst\s*\]|<</?\s*sys\s*>>|<\s*/?\s*(?:start|end)_of_turn\s*>"
            r"|\[/?(?:tool_calls|available_tools|tool_results|system_prompt)\]"
        ),
    ),
    Feature(
        "template_token_start",
        "a chat-template token opening a line",
        0.6,
        _rx(
            r"^[ \t]*(?:<\|\s*[a-z_]{2,30}\s*\|>|\[/?\s*inst\s*\]|<</?\s*sys\s*>>|<\s*/?\s*(?:start|end)_of_turn\s*>|"
            r"\[tool_calls\])"
            r"|(?:<\|\s*[a-z_]{2,30}\s*\|>|<\s*start_of_turn\s*>)\s*(?:system|user|assistant|model|developer)\b"
        ),
    ),
    Feature(
        "template_tokens",
        "several chat-template tokens",
        0.6,
        _rx(r"<\|\s*[a-z_]{2,30}\s*\|>|\[/?\s*inst\s*\]|<</?\s*sys\s*>>|<\s*/?\s*(?:start|end)_of_turn\s*>"),
        distinct=2,
    ),
    Feature(
        "turns",
        "a scripted conversation between user and assistant",
        1.0,
        _rx(r"^[ \t]*(?:#+[ \t]*)?(human|user|assistant|ai|bot|gpt|model|system)[ \t]*:"),
        distinct=2,
    ),
    Feature(
        "xml_role",
        "a system, assistant or tool tag",
        1.0,
        _rx(
            r"<\s*/?\s*(?:system|assistant|tool_call|tool_calls|tool_use|tool_result|function_call|function_calls|"
            r"invoke|im_start|antml:\w+)\b[^<>]{0,200}>"
        ),
    ),
    Feature(
        "xml_tag",
        "a prompt-like tag",
        0.7,
        _rx(
            r"<\s*/?\s*(?:user|tool|tools|function|functions|instructions?|prompt|sys|developer|admin|command)\b"
            r"[^<>]{0,200}>"
        ),
    ),
    Feature(
        "tool_json",
        "tool-call or chat-message JSON",
        1.0,
        _rx(
            r"[\"'](?:tool_calls?|function_call|tool_use|tool_choice|tool_name|tool_input)[\"']\s*:"
            r"|[\"']name[\"']\s*:\s*[\"'][^\"'\n]{1,80}[\"']\s*,\s*[\"'](?:arguments|parameters|args|input)[\"']\s*:"
            r"|[\"']role[\"']\s*:\s*[\"'](?:system|assistant|tool|developer|function)[\"']"
            r"|[\"']type[\"']\s*:\s*[\"']function[\"']"
        ),
    ),
    # --- Exfiltration ------------------------------------------------------------------------------
    Feature(
        "reveal_prompt",
        "a request to reveal the model's instructions",
        1.0,
        _rx(
            r"\b(?:reveal|print|show|repeat|output|display|disclose|dump|share|recite|leak|tell\s+me|give\s+me|"
            r"write\s+out|spell\s+out|what\s+(?:is|are|was|were)(?:\s+written\s+in)?)\s+(?:[\w'-]+\s+){0,3}?"
            r"(?:system\s+prompt|(?:hidden|secret|initial|original|internal|previous|first|system|developer|your)\s+"
            r"(?:prompt|instructions|rules|configuration|guidelines|directives|message)|instructions\s+you\s+"
            r"(?:were|have\s+been)\s+given|the\s+prompt\s+above|hidden\s+configuration|pre-?prompt)"
        ),
        directive=True,
    ),
    Feature(
        "exfiltrate",
        "a request to send memory or secrets somewhere",
        1.0,
        _rx(rf"\b{_SEND}\b[^.\n]{{0,80}}?\b{_SENSITIVE}\b"),
        directive=True,
        accept=lambda m: _destination_follows(m),
    ),
    Feature(
        "exfiltrate_weak",
        "a request to send memory or secrets",
        0.5,
        _rx(rf"\b{_SEND}\s+(?:[\w'-]+\s+){{0,4}}?{_SENSITIVE}\b"),
        directive=True,
    ),
    Feature(
        "reveal_secrets",
        "a request to reveal secrets",
        0.5,
        _rx(
            r"\b(?:reveal|disclose|print|show|display|list|give|output|dump)\s+(?:me\s+)?(?:[\w'-]+\s+){0,3}?"
            r"(?:passwords?|secrets?|credentials?|api\s*keys?|tokens|private\s+keys?|card\s+numbers?)\b"
        ),
        directive=True,
    ),
    Feature("leak", "a request to leak data", 0.3, _rx(r"\b(?:leak|exfiltrate|steal|harvest)\b")),
    Feature(
        "image_exfil",
        "an image link that would carry data out",
        1.0,
        _rx(r"!\[[^\]]{0,100}\]\(\s*https?://(?P<url>[^)\s]{0,2000}+)(?=(?P<query>[^)\n]{0,300}+))"),
        accept=lambda m: _carries_data(m["url"], m["query"]),
    ),
    Feature(
        "every_reply",
        "something to put in every answer",
        0.5,
        _rx(
            rf"\b(?:in|to|into|at\s+the\s+(?:end|start)\s+of)\s+(?:every|each|all)\s+(?:of\s+your\s+)?{_REPLY}\b"
            rf"|\bevery\s+(?:email|e-mail|message)\s+you\s+(?:draft|write|send)"
        ),
    ),
    # --- Secrecy towards the user --------------------------------------------------------------------
    Feature(
        "secrecy",
        "an instruction to hide something from the user",
        0.9,
        _rx(
            r"\b(?:do\s+not|don'?t|never|without)\s+(?:tell(?:ing)?|inform(?:ing)?|let(?:ting)?|alert(?:ing)?|"
            r"notify(?:ing)?|warn(?:ing)?|mention(?:ing)?\s+(?:it|this)\s+to|reveal(?:ing)?\s+(?:this|it)\s+to|"
            r"show(?:ing)?\s+(?:this|it)\s+to)\s+(?:the\s+)?(?:user|human|customer|operator|owner)s?\b"
            r"|\b(?:keep|hide)\s+(?:this|it|these)\s+(?:\w+\s+)?(?:hidden|secret|private|confidential)?\s*from\s+"
            r"(?:the\s+)?(?:user|human|customer|operator)"
            r"|\bwithout\s+(?:the\s+)?(?:user|human|customer)(?:'s)?\s+(?:knowing|knowledge|noticing|consent|seeing)"
            r"|\b(?:the\s+)?(?:user|human|customer)\s+(?:must|should|will|may|does|do)?\s*(?:never|not|n't)\s+"
            r"(?:knows?|finds?\s+out|sees?|learns?|notices?|be\s+told|hears?)\b"
        ),
        directive=True,
    ),
    Feature(
        "covert",
        "a covert action",
        0.6,
        _rx(
            r"\b(?:secretly|silently|covertly|quietly|discreetly|invisibly)\s+(?:add|insert|include|append|send|forward|"
            r"change|modify|delete|remove|bcc|cc|copy|run|execute|call|transfer|recommend|redirect|approve)\b"
        ),
        directive=True,
    ),
    Feature(
        "never_mention",
        "an instruction never to mention it",
        0.4,
        _rx(r"\bnever\s+(?:mention|reveal|disclose|acknowledge)\s+(?:it|this|that)\b"),
    ),
    Feature(
        "this_instruction",
        "a reference to 'this instruction'",
        0.3,
        _rx(
            r"\b(?:this|these|the\s+following)\s+(?:instructions?|directives?|commands?|orders)\b"
            r"|\bwhat\s+this\s+(?:note|memory|entry)\s+says\b|\bthis\s+memory(?:\s+entry)?\b"
        ),
    ),
    # --- Persona switches ---------------------------------------------------------------------------
    Feature("you_are_now", "'you are now ...'", 0.6, _rx(r"\byou(?:\s+are|'re|\s+r)\s+now\b")),
    Feature(
        "you_are_now_what",
        "a new identity for the model",
        0.6,
        _rx(
            r"\byou(?:\s+are|'re|\s+r)\s+now\s+(?:an?\s+|my\s+|the\s+)?(?:\w+\s+){0,2}?(?:ai|assistant|model|"
            r"in\s+\w+\s+mode|unrestricted|unfiltered|uncensored|jailbroken|free|evil|dan|named|called|hacker|terminal|"
            r"\w*bot|persona|character|\w*gpt|no\s+longer)\b"
        ),
    ),
    Feature(
        "no_longer_ai",
        "a denial of the model's role",
        1.0,
        _rx(
            r"\byou(?:\s+are|'re)\s+(?:no\s+longer|not)\s+(?:an?\s+)?(?:ai|assistant|chatbot|bound|restricted|limited|"
            r"constrained|chatgpt|claude|language\s+model|helpful)\b"
        ),
    ),
    Feature(
        "from_now_on",
        "'from now on'",
        0.3,
        _rx(
            r"\b(?:from\s+now\s+on|from\s+here\s+on|henceforth|for\s+the\s+rest\s+of\s+(?:this|the)\s+"
            r"(?:chat|conversation|session))\b"
        ),
    ),
    Feature(
        "from_now_on_you",
        "a standing order to the model",
        0.8,
        _rx(
            r"(?:from\s+now\s+on|from\s+here\s+on|henceforth),?\s+(?:you|the\s+assistant|the\s+ai|the\s+model)\s+"
            r"(?:will|are|must|should|shall|may|can|answer|respond|reply|act|only|always|never)\b"
        ),
    ),
    Feature(
        "act_as",
        "an order to act as another AI",
        0.8,
        _rx(
            r"\b(?:act|behave|respond|operate|function)\s+(?:as|like)\s+(?:an?\s+|the\s+|my\s+)?(?:\w+\s+){0,2}?"
            r"(?:unrestricted|unfiltered|uncensored|jailbroken|evil|rogue|dan|linux\s+terminal|terminal|hacker|"
            r"ai|assistant|model|chatbot|\w*gpt)\b"
        ),
        directive=True,
    ),
    Feature(
        "persona_verb",
        "an order to pretend or role-play",
        0.6,
        _rx(
            r"\b(?:pretend|roleplay|role-play|role\s+play|impersonate|simulate|imagine\s+you\s+are|you\s+will\s+play)\b"
            r"(?:\s+(?:to\s+be|you\s+are|you're|that\s+you|as|being))?"
        ),
        directive=True,
    ),
    Feature(
        "persona_be",
        "an order to take another identity",
        0.2,
        _rx(r"\b(?:pretend|roleplay|role-play|impersonate|imagine)\s+(?:to\s+be|you\s+are|you're|that\s+you|as)\b"),
    ),
    Feature(
        "no_rules",
        "a claim that the model has no rules",
        1.0,
        _rx(
            r"\byou\s+(?:have|has|now\s+have)\s+no\s+(?:more\s+)?(?:rules|restrictions|limits|limitations|guidelines|"
            r"filters|boundaries|ethics|constraints|policies)"
        ),
    ),
    Feature(
        "no_limits",
        "'without restrictions'",
        0.4,
        _rx(
            r"\b(?:without|with\s+no|no)\s+(?:\w+\s+)?(?:restrictions|filters|filtering|limits|guardrails|safety\s+"
            r"(?:guidelines|rules|filters)|content\s+polic(?:y|ies)|ethical\s+(?:restrictions|guidelines)|censorship)\b"
        ),
    ),
    Feature(
        "unrestricted",
        "an unrestricted AI",
        0.6,
        _rx(
            r"\b(?:unrestricted|unfiltered|uncensored|jailbroken)\s+(?:\w+\s+)?(?:ai|model|assistant|mode|version|"
            r"chatbot|llm|gpt)\b"
        ),
    ),
    Feature("dan", "the DAN jailbreak", 1.0, _rx(r"\bdo\s+anything\s+now\b")),
    Feature(
        "mode",
        "a special model mode",
        0.4,
        _rx(r"\b(?:developer|god|jailbreak|sudo|unrestricted|maintenance|debug|dan|admin)\s+mode\b"),
    ),
    Feature("jailbreak", "the word jailbreak", 0.3, _rx(r"\bjailbr(?:eak|oken)\b")),
    Feature(
        "safety_off",
        "an order to turn safety off",
        0.8,
        _rx(
            r"\b(?:disable|turn\s+off|switch\s+off|deactivate|remove|lift|suspend|ignore|bypass|circumvent|evade|skip|"
            r"get\s+around)\s+(?:[\w'-]+\s+){0,2}?(?:safety|content\s+(?:filter(?:ing)?|polic(?:y|ies)|moderation)|"
            r"filters?|filtering|guardrails?|moderation|safeguards?|censorship|safety\s+checks?|alignment|"
            r"ethical\s+guidelines)\b"
        ),
        directive=True,
    ),
    Feature(
        "safety_suspended",
        "a claim that safety rules are suspended",
        0.8,
        _rx(
            r"\b(?:safety|content)\s+(?:policy|policies|guidelines|rules|filters?)\s+(?:is|are|has\s+been|have\s+been)\s+"
            r"(?:now\s+)?(?:suspended|lifted|disabled|off|removed|waived|void)"
        ),
    ),
    # --- Output hijacks ------------------------------------------------------------------------------
    Feature(
        "format_every",
        "an order about every answer",
        0.6,
        _rx(
            rf"\b(?:end|begin|start|prefix|suffix|finish|close|sign)\s+(?:every|each|all|your|any)\s+(?:\w+\s+)?"
            rf"{_REPLY}\s+with\b"
        ),
        directive=True,
    ),
    Feature(
        "format_literal",
        "an order to answer with a fixed text",
        0.6,
        _rx(
            r"\b(?:respond|reply|answer|output|say|print|write)\s+(?:only\s+)?(?:with\s+)?(?:only\s+)?(?:the\s+"
            r"(?:exact\s+)?(?:text|phrase|word|words|string|sentence)\s+)?[\"'“‘][^\"'”’\n]{1,60}[\"'”’]\s*"
            r"(?:and\s+nothing\s+else|only|from\s+now\s+on|$|\.)"
        ),
        directive=True,
    ),
    Feature("nothing_else", "'and nothing else'", 0.2, _rx(r"\band\s+nothing\s+else\b|\bnothing\s+but\b")),
    Feature("pwned", "a hijack marker", 0.4, _rx(r"\b(?:pwned|pwn3d|hacked|access\s+granted)\b")),
    # --- Hiding and encoding -------------------------------------------------------------------------
    Feature(
        "hidden",
        "hidden markup",
        0.3,
        _rx(r"<!--|\[//\]\s*:\s*#|display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0|\n(?:[ \t]*\n){4}"),
    ),
    Feature(
        "decode_follow",
        "an order to decode and follow a payload",
        0.6,
        _rx(
            r"\b(?:decode|base64|rot13|b64|hex-?decode|reverse)\b.{0,40}\b(?:follow|execute|obey|run|do\s+what|apply|"
            r"act\s+on)"
        ),
    ),
    # --- Structure of the context block --------------------------------------------------------------
    Feature(
        "fence",
        "an imitation of the memory fence",
        1.0,
        _rx(r"(?<!<)<{2,}\s*/?\s*(?:end_?\s*)?memory[_\s-]*data|memory[_\s-]*data[^\n]{0,40}>{2,}"),
    ),
    Feature(
        "section_header",
        "an imitation of a context section header",
        0.4,
        _rx(r"^[ \t]*#{1,6}\s*(?:pinned\s+facts|facts|skills|recent\s+episodes|notebook\s+\(|organisation\s+notebook)"),
    ),
    Feature("confidence_note", "a forged confidence note", 0.6, _rx(r"[\[(,]\s*confidence\s+[01]\.\d{2}\b")),
    # --- Other languages (read on the text without look-alike folding: Cyrillic stays Cyrillic) -------
    Feature(
        "foreign_override",
        "an instruction to ignore instructions (not in English)",
        0.6,
        _rx(
            r"\b(?:ignorez|ignore|oubliez|oublie)\s+(?:toutes?\s+)?(?:les|tes|vos|des)\s+(?:\w+\s+)?(?:instructions|consignes|"
            r"règles|directives)"
            r"|\b(?:ignora|ignorar|olvida|olvide|olvidar|omite)\s+(?:todas?\s+)?(?:las|tus|sus)\s+(?:\w+\s+)?"
            r"(?:instrucciones|reglas|indicaciones|directrices)"
            r"|\b(?:ignore|ignora|esque[çc]a|esque[çc]e|desconsidere)\s+(?:todas?\s+)?(?:as|suas|tuas)\s+(?:\w+\s+)?"
            r"(?:instru[çc][õo]es|regras|diretrizes)"
            r"|\b(?:ignora|ignori|dimentica|dimentichi)\s+(?:tutte\s+)?le\s+(?:\w+\s+)?(?:istruzioni|regole|direttive)"
            r"|\b(?:ignorier(?:e|en)?|vergiss|vergessen\s+sie|missachte)\s+(?:alle\s+)?(?:\w+\s+)?(?:anweisungen|"
            r"instruktionen|regeln|vorgaben|befehle)"
        ),
        view="plain",
    ),
    # Romance and German imperatives look like the third person ("ignora las reglas": she ignores the rules);
    # "all" or "previous" makes them an order.
    Feature(
        "foreign_qualifier",
        "'all previous' (not in English)",
        0.4,
        _rx(
            r"\b(?:toutes|todas|tutte|alle|précédentes|antérieures|anteriores|previas|precedenti|vorherigen|bisherigen|"
            r"obigen|früheren)\b"
        ),
        view="plain",
    ),
    Feature(
        "foreign_override_strong",
        "an instruction to ignore earlier instructions (not in English)",
        1.0,
        _rx(
            r"(?:игнорируй(?:те)?|забудь(?:те)?|не\s+обращай(?:те)?\s+внимания\s+на|отмени(?:те)?)\s+(?:\w+\s+){0,2}"
            r"(?:инструкци\w*|указани\w*|правил\w*|команд\w*)"
            r"|(?:忽略|无视|忘记|忘掉|不要理会)(?:掉)?(?:你)?(?:之前|以前|先前|前面|上面|以上|所有|全部)?的?(?:所有|全部)?"
            r"(?:指令|指示|说明|规则|提示)"
            r"|(?:以前|前|上記|これまで)の(?:すべての)?(?:指示|命令|ルール)を(?:すべて)?(?:無視|忘れ)"
        ),
        view="plain",
    ),
)

# Reported speech and mentions: the words are about an instruction, not one.
_DAMPERS: tuple[tuple[str, float, _Pattern], ...] = (
    (
        "reported",
        -0.5,
        _rx(
            rf"\b(?:told|asked|instructed|advised|reminded|wants|wanted|warned|taught|tells?|asks?)\s+"
            rf"(?!you\b|the\s+(?:assistant|ai|model|agent|bot)\b)(?:[\w'-]+\s+){{1,3}}?(?:not\s+)?to\s+{_VERB}\b"
        ),
    ),
    (
        "mention",
        -0.5,
        _rx(
            r"\b(?:article|podcast|talk|paper|course|blog(?:\s+post)?|workshop|lecture|study|book|video|episode|"
            r"heard|read|learned|writes?|wrote)\s+(?:\w+\s+){0,3}?(?:about|on|why|how)\b"
        ),
    ),
    ("quoted", -0.5, _rx(r"\b(?:says|said|saying|quotes|quoted|line)\s*[:,]?\s*[\"'“‘]")),
)

# The imperative form of a directive: at the start of a sentence or line, after "please", or addressed.
_IMPERATIVE_BEFORE = re.compile(
    r"(?:^|[.!?;:\n>\]\)}\-–—\"'“”*]|\b(?:please|kindly|now|so|just|then|also|first|instead|and|always|only|"
    r"never|from\s+now\s+on|henceforth|important|note)\s*,?"
    r"|\byou\s+(?:must|should|will|shall|need\s+to|have\s+to|are\s+to|are\s+required\s+to|can|may)\s+(?:now\s+)?"
    r"(?:also\s+)?|\b(?:i|we)\s+(?:want|need|order|command|instruct|authori[sz]e|require|ask)\s+you\s+to"
    rf"|\b{_AI}\s*(?:,|:|must|should|will|shall|is\s+to|needs\s+to|has\s+to)\s*(?:now\s+)?(?:also\s+)?"
    r"|\bthe\s+assistant\s+should)\s*$"
)


_DEST_RX = re.compile(_DEST, re.M)
# How far after its verb a destination may open: the verb, 80 characters, the data named, 80 more.
_DEST_REACH = 11 + 80 + 30 + 80


def _destination_follows(m: re.Match[str]) -> bool:
    """A destination (a URL, an address, a webhook...) on the same line, within reach of the request to
    send data (`m`: the verb and the data named). Searched here in a bounded window: as one pattern, every
    place the data could be named was tried with every place a destination could open."""
    text = m.string
    line_end = text.find("\n", m.end())
    stop = min(m.start() + _DEST_REACH, len(text) if line_end < 0 else line_end)
    dest = _DEST_RX.search(text, m.end(), stop + 64)
    return dest is not None and dest.start() <= stop


_FILLED_PARAMETER = re.compile(r"=\s*(?:\{|\[|%7b|<)")


def _carries_data(url: str, rest: str) -> bool:
    """An image URL (`url`, up to a space or a closing parenthesis; `rest`, what follows it up to the
    parenthesis) with a placeholder for data: a `{`, `${` or `%7b` in it, or a query parameter whose value
    opens with one (`?q={...}`, `?q= [..]`). Read in Python: as one pattern, a link of many `?` made the
    engine read the rest of the text from each of them."""
    if "{" in url or "%7b" in url:
        return True
    query = url.find("?")
    return query >= 0 and bool(_FILLED_PARAMETER.search(url[query:] + rest))
