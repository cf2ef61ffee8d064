"""Sentences with the word links each head role should make, marked by hand (notebook 05).

Each `RoleSentence` names one role and the links (from-word, to-word) that a
head doing that job should make in the sentence: for "coreference", the
pronoun "it" and the noun it refers to. A marked word is written without
punctuation and occurs exactly once in its sentence (case-insensitive), so it
names one place. Most sentences have a minimal-pair `partner`: the same
sentence with one word changed, replaced or inserted, so that the right answer
moves (the animal was too *tired* / the street was too *wide*; on the mat / on
the *old* mat). A head that has learnt the role follows the change; a head that
has only learnt a fixed offset or a favourite word does not.

The positional roles (previous token, next token) need no marks: every
sentence serves for them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROLES", "SENTENCES", "RoleSentence", "partner_of"]


@dataclass(frozen=True)
class RoleSentence:
    """One sentence, the role it tests, its hand-marked links and its minimal-pair partner."""

    sentence: str
    role: str  # one of ROLES
    links: tuple[tuple[str, str], ...]  # (from-word, to-word), each word once in the sentence
    partner: str | None = None  # the minimal-pair sentence (also in SENTENCES, same role)


ROLES = {
    "coreference": "the pronoun 'it' -> the noun it refers to",
    "negation": "'didn't' -> the verb it negates",
    "preposition": "a preposition -> its object noun",
    "agreement": "a verb -> its subject noun (past a distracting noun)",
}


def _pair(role: str, a: str, links_a, b: str, links_b) -> list[RoleSentence]:
    return [RoleSentence(a, role, tuple(links_a), b), RoleSentence(b, role, tuple(links_b), a)]


SENTENCES: list[RoleSentence] = [
    # coreference: one adjective decides what "it" is (Winograd-style pairs)
    *_pair(
        "coreference",
        "The animal didn't cross the street because it was too tired.",
        [("it", "animal")],
        "The animal didn't cross the street because it was too wide.",
        [("it", "street")],
    ),
    *_pair(
        "coreference",
        "The trophy didn't fit in the suitcase because it was too big.",
        [("it", "trophy")],
        "The trophy didn't fit in the suitcase because it was too small.",
        [("it", "suitcase")],
    ),
    *_pair(
        "coreference",
        "The ball broke the window because it was heavy.",
        [("it", "ball")],
        "The ball broke the window because it was fragile.",
        [("it", "window")],
    ),
    *_pair(
        "coreference",
        "The cat caught the mouse because it was fast.",
        [("it", "cat")],
        "The cat caught the mouse because it was slow.",
        [("it", "mouse")],
    ),
    *_pair(
        "coreference",
        "The rope could not hold the boat because it was too weak.",
        [("it", "rope")],
        "The rope could not hold the boat because it was too heavy.",
        [("it", "boat")],
    ),
    *_pair(
        "coreference",
        "The bottle did not fit in the bag because it was too large.",
        [("it", "bottle")],
        "The bottle did not fit in the bag because it was too full.",
        [("it", "bag")],
    ),
    # negation: an inserted adverb moves the verb one word away
    *_pair(
        "negation",
        "The dog didn't bark at the mailman.",
        [("didn't", "bark")],
        "The dog didn't even bark at the mailman.",
        [("didn't", "bark")],
    ),
    *_pair(
        "negation",
        "She didn't finish her homework on time.",
        [("didn't", "finish")],
        "She didn't quite finish her homework on time.",
        [("didn't", "finish")],
    ),
    *_pair(
        "negation",
        "They didn't lock the front door.",
        [("didn't", "lock")],
        "They didn't always lock the front door.",
        [("didn't", "lock")],
    ),
    # prepositions: an inserted adjective moves the object one word away
    *_pair(
        "preposition",
        "The cat slept on the mat.",
        [("on", "mat")],
        "The cat slept on the old mat.",
        [("on", "mat")],
    ),
    *_pair(
        "preposition",
        "We walked along the river after lunch.",
        [("along", "river"), ("after", "lunch")],
        "We walked along the quiet river after lunch.",
        [("along", "river"), ("after", "lunch")],
    ),
    *_pair(
        "preposition",
        "He hid the key under the stone.",
        [("under", "stone")],
        "He hid the key under the flat stone.",
        [("under", "stone")],
    ),
    *_pair(
        "preposition",
        "A man waited at the station in the rain.",
        [("at", "station"), ("in", "rain")],
        "A man waited at the busy station in the rain.",
        [("at", "station"), ("in", "rain")],
    ),
    # subject-verb agreement: the verb must find its subject, not the nearer noun
    *_pair(
        "agreement",
        "The key to the cabinets is missing.",
        [("is", "key")],
        "The small key to the cabinets is missing.",
        [("is", "key")],
    ),
    *_pair(
        "agreement",
        "The dogs near the house bark loudly.",
        [("bark", "dogs")],
        "The two dogs near the house bark loudly.",
        [("bark", "dogs")],
    ),
    *_pair(
        "agreement",
        "The girl with the red shoes runs fast.",
        [("runs", "girl")],
        "The little girl with the red shoes runs fast.",
        [("runs", "girl")],
    ),
    RoleSentence("The books on the shelf are old.", "agreement", (("are", "books"),)),
    RoleSentence("The teacher of the students was late.", "agreement", (("was", "teacher"),)),
]


def partner_of(item: RoleSentence) -> RoleSentence | None:
    """The minimal-pair partner of `item` in SENTENCES (same role), or None."""
    if item.partner is None:
        return None
    for other in SENTENCES:
        if other.sentence == item.partner and other.role == item.role:
            return other
    raise LookupError(f"the partner of {item.sentence!r} is not in SENTENCES")
