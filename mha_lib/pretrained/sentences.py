"""Minimal pairs of sentences with the word links each head role should make (notebook 05).

A `MinimalPair` holds two sentences of one role, each with a hand-marked link
(from-word -> to-word): for "coreference", the pronoun "it" and the noun it
refers to. A marked word is written without punctuation and occurs exactly once
in its sentence (case-insensitive), so it names one place. The two sentences
differ so that the answer moves in a way a shortcut cannot follow:

- coreference: one adjective changes the referent (the animal was too *tired* /
  the street was too *wide*), so "it" must look at a different noun;
- negation: an adverb is inserted between "didn't" and its verb;
- preposition and object: an adjective is inserted before the noun;
- agreement: a prepositional phrase or a relative clause is inserted between
  the subject and its verb (The dogs bark / The dogs near the house bark);
- similarity: the noun of similar meaning and an unrelated noun swap places.

In every pair the to-word sits at a different distance (in words) from the
from-word in the two sentences, or is a different word, so a head that attends
at a fixed offset, evenly, or to [CLS] cannot get both sentences right, with one
exception that `tests/pretrained/test_roles.py` pins down: scored backwards (verb ->
"didn't"), a fixed offset of -2 tokens lands inside "didn't" (didn ' t) with or
without the inserted adverb, so those pairs cannot tell that role from the shortcut.

`PAIRS[role]` has at least 20 pairs; `split(pairs)` cuts them into a selection
half (even places) and a held-out half (odd places).

The positional roles (previous token, next token) need no marks: every
sentence serves for them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAIRS", "ROLES", "Marked", "MinimalPair", "sentences", "split"]


@dataclass(frozen=True)
class Marked:
    """One sentence and its hand-marked link src -> dst (each word once in the sentence)."""

    sentence: str
    src: str  # the from-word (the query)
    dst: str  # the to-word the role should attend to (the key)


@dataclass(frozen=True)
class MinimalPair:
    """Two sentences of one role whose right answer moves from a to b."""

    role: str  # one of ROLES
    a: Marked
    b: Marked
    change: str  # what differs: "adjective swapped", "word inserted", "phrase inserted", ...


ROLES = {
    "coreference": "'it' -> the noun it refers to; one adjective changes the referent",
    "negation": "'didn't' -> the verb it negates; an adverb inserted before the verb",
    "preposition": "a preposition -> its object noun; an adjective inserted before the noun",
    "agreement": "a verb -> its subject noun; a phrase or clause inserted between them",
    "object": "a verb -> its object noun; an adjective inserted before the noun",
    "similarity": "a noun -> the noun of similar meaning; it swaps places with an unrelated one",
}


def _coreference(rows) -> list[MinimalPair]:
    # (sentence with {} for the adjective, "adjective referent" of a, the same of b)
    pairs = []
    for s, a, b in rows:
        (adj_a, ref_a), (adj_b, ref_b) = a.split(), b.split()
        pairs.append(
            MinimalPair(
                "coreference",
                Marked(s.format(adj_a), "it", ref_a),
                Marked(s.format(adj_b), "it", ref_b),
                "adjective swapped",
            )
        )
    return pairs


def _inserted(role: str, rows, change: str = "word inserted") -> list[MinimalPair]:
    # (sentence with {} where the insert goes, src, dst, insert): a = without, b = with
    pairs = []
    for s, src, dst, insert in rows:
        a = " ".join(s.format("").split())
        b = s.format(insert)
        pairs.append(MinimalPair(role, Marked(a, src, dst), Marked(b, src, dst), change))
    return pairs


def _swapped(rows) -> list[MinimalPair]:
    # (src, similar noun, unrelated noun): the two nouns swap places
    frame = "The {} was next to a {} and a {}."
    return [
        MinimalPair(
            "similarity",
            Marked(frame.format(src, similar, other), src, similar),
            Marked(frame.format(src, other, similar), src, similar),
            "nouns swapped",
        )
        for src, similar, other in rows
    ]


PAIRS: dict[str, list[MinimalPair]] = {
    "coreference": _coreference(
        [
            (
                "The animal didn't cross the street because it was too {}.",
                "tired animal",
                "wide street",
            ),
            (
                "The trophy didn't fit in the suitcase because it was too {}.",
                "big trophy",
                "small suitcase",
            ),
            ("The ball broke the window because it was {}.", "heavy ball", "fragile window"),
            ("The cat caught the mouse because it was {}.", "fast cat", "slow mouse"),
            ("The rope could not hold the boat because it was too {}.", "weak rope", "heavy boat"),
            (
                "The bottle did not fit in the bag because it was too {}.",
                "large bottle",
                "full bag",
            ),
            (
                "The table would not fit through the door because it was too {}.",
                "wide table",
                "narrow door",
            ),
            ("The dog chased the bus because it was {}.", "bored dog", "loud bus"),
            ("The hammer broke the vase because it was {}.", "heavy hammer", "fragile vase"),
            ("The pan would not fit on the stove because it was too {}.", "big pan", "small stove"),
            ("The car passed the truck because it was {}.", "fast car", "slow truck"),
            (
                "The horse could not jump the fence because it was too {}.",
                "tired horse",
                "high fence",
            ),
            (
                "The coat did not fit in the closet because it was too {}.",
                "long coat",
                "full closet",
            ),
            ("The bird could not crack the nut because it was too {}.", "weak bird", "hard nut"),
            ("The lamp did not light the room because it was too {}.", "dim lamp", "big room"),
            (
                "The blanket did not cover the bed because it was too {}.",
                "short blanket",
                "wide bed",
            ),
            (
                "The laptop did not fit in the drawer because it was too {}.",
                "thick laptop",
                "shallow drawer",
            ),
            (
                "The puppy could not climb the ladder because it was too {}.",
                "small puppy",
                "steep ladder",
            ),
            (
                "The plank could not bridge the gap because it was too {}.",
                "short plank",
                "wide gap",
            ),
            (
                "The fish could not swim in the pond because it was too {}.",
                "big fish",
                "shallow pond",
            ),
            ("The bag could not hold the melon because it was too {}.", "small bag", "big melon"),
            (
                "The shelf could not hold the television because it was too {}.",
                "weak shelf",
                "heavy television",
            ),
        ]
    ),
    "negation": _inserted(
        "negation",
        [
            ("The dog didn't {} bark at the mailman.", "didn't", "bark", "even"),
            ("She didn't {} finish her homework on time.", "didn't", "finish", "quite"),
            ("They didn't {} lock the front door.", "didn't", "lock", "always"),
            ("He didn't {} call his mother yesterday.", "didn't", "call", "even"),
            ("We didn't {} see the movie last night.", "didn't", "see", "actually"),
            ("The boy didn't {} eat his vegetables.", "didn't", "eat", "even"),
            ("The team didn't {} win the final game.", "didn't", "win", "quite"),
            ("My friend didn't {} answer the phone.", "didn't", "answer", "even"),
            ("The baby didn't {} sleep through the night.", "didn't", "sleep", "really"),
            ("The bus didn't {} stop at the corner.", "didn't", "stop", "even"),
            ("The students didn't {} read the book.", "didn't", "read", "really"),
            ("The farmer didn't {} sell his cows.", "didn't", "sell", "actually"),
            ("The store didn't {} open on Sunday.", "didn't", "open", "even"),
            ("Our neighbour didn't {} cut the grass.", "didn't", "cut", "always"),
            ("The child didn't {} touch the cake.", "didn't", "touch", "even"),
            ("The driver didn't {} notice the sign.", "didn't", "notice", "really"),
            ("The printer didn't {} work this morning.", "didn't", "work", "quite"),
            ("The guests didn't {} enjoy the dinner.", "didn't", "enjoy", "really"),
            ("The cat didn't {} drink its milk.", "didn't", "drink", "even"),
            ("The pilot didn't {} land the plane safely.", "didn't", "land", "quite"),
            ("The police didn't {} catch the thief.", "didn't", "catch", "actually"),
            ("The old man didn't {} remember my name.", "didn't", "remember", "even"),
        ],
    ),
    "preposition": _inserted(
        "preposition",
        [
            ("The cat slept on the {} mat.", "on", "mat", "old"),
            ("We walked along the {} river.", "along", "river", "quiet"),
            ("He hid the key under the {} stone.", "under", "stone", "flat"),
            ("A man waited at the {} station.", "at", "station", "busy"),
            ("The children played in the {} garden.", "in", "garden", "small"),
            ("She put the letter into the {} envelope.", "into", "envelope", "white"),
            ("The bird flew over the {} house.", "over", "house", "tall"),
            ("They sat beside the {} fire.", "beside", "fire", "warm"),
            ("The book fell behind the {} sofa.", "behind", "sofa", "green"),
            ("He swam across the {} lake.", "across", "lake", "cold"),
            ("The car stopped near the {} bridge.", "near", "bridge", "old"),
            ("We talked about the {} film.", "about", "film", "new"),
            ("The lamp hangs above the {} table.", "above", "table", "round"),
            ("The ball rolled under the {} bed.", "under", "bed", "big"),
            ("She waited for the {} bus.", "for", "bus", "late"),
            ("The dog ran through the {} park.", "through", "park", "empty"),
            ("The boy hid behind the {} door.", "behind", "door", "heavy"),
            ("The plane flew above the {} clouds.", "above", "clouds", "dark"),
            ("He parked behind the {} shop.", "behind", "shop", "small"),
            ("The cup stood on the {} shelf.", "on", "shelf", "wooden"),
            ("The path led to the {} village.", "to", "village", "quiet"),
            ("The keys were in the {} drawer.", "in", "drawer", "top"),
        ],
    ),
    "agreement": _inserted(
        "agreement",
        [
            ("The key {} is missing.", "is", "key", "to the cabinets"),
            ("The dogs {} bark loudly.", "bark", "dogs", "near the house"),
            ("The girl {} runs fast.", "runs", "girl", "with the red shoes"),
            ("The books {} are old.", "are", "books", "on the shelf"),
            ("The teacher {} was late.", "was", "teacher", "of the students"),
            ("The man {} was rich.", "was", "man", "who sold the cars"),
            ("The boys {} play well.", "play", "boys", "that the coach trained"),
            ("The woman {} sings beautifully.", "sings", "woman", "from the bakery"),
            ("The car {} needs repairs.", "needs", "car", "with the broken lights"),
            ("The flowers {} smell sweet.", "smell", "flowers", "in the garden"),
            ("The letter {} was short.", "was", "letter", "from the lawyers"),
            ("The students {} were happy.", "were", "students", "who met the author"),
            ("The cake {} tastes good.", "tastes", "cake", "that the children baked"),
            ("The soldiers {} stand still.", "stand", "soldiers", "near the gate"),
            ("The doctor {} looks tired.", "looks", "doctor", "who treated the patients"),
            ("The box {} is heavy.", "is", "box", "under the tables"),
            ("The birds {} sing loudly.", "sing", "birds", "in the tree"),
            ("The player {} scores often.", "scores", "player", "with the blue boots"),
            ("The houses {} look old.", "look", "houses", "along the road"),
            ("The painting {} was sold.", "was", "painting", "that the visitors liked"),
            ("The clock {} is broken.", "is", "clock", "in the kitchen"),
            ("The musicians {} were tired.", "were", "musicians", "in the band"),
        ],
        change="phrase inserted",
    ),
    "object": _inserted(
        "object",
        [
            ("She read the {} book.", "read", "book", "old"),
            ("He opened the {} door.", "opened", "door", "heavy"),
            ("They painted the {} fence.", "painted", "fence", "wooden"),
            ("We bought a {} car.", "bought", "car", "new"),
            ("The boy kicked the {} ball.", "kicked", "ball", "red"),
            ("The cook cut the {} bread.", "cut", "bread", "fresh"),
            ("My sister wrote a {} letter.", "wrote", "letter", "long"),
            ("The farmer fed the {} horses.", "fed", "horses", "hungry"),
            ("The girl found a {} coin.", "found", "coin", "shiny"),
            ("He fixed the {} bike.", "fixed", "bike", "broken"),
            ("They cleaned the {} kitchen.", "cleaned", "kitchen", "dirty"),
            ("The child drew a {} house.", "drew", "house", "little"),
            ("We watched the {} game.", "watched", "game", "exciting"),
            ("She carried the {} bag.", "carried", "bag", "heavy"),
            ("The dog chewed the {} shoe.", "chewed", "shoe", "leather"),
            ("He washed the {} dishes.", "washed", "dishes", "dirty"),
            ("The artist painted a {} portrait.", "painted", "portrait", "large"),
            ("They planted a {} tree.", "planted", "tree", "young"),
            ("The students answered the {} questions.", "answered", "questions", "difficult"),
            ("She lost her {} keys.", "lost", "keys", "spare"),
            ("He sold his {} house.", "sold", "house", "old"),
            ("The cat chased a {} mouse.", "chased", "mouse", "small"),
        ],
    ),
    "similarity": _swapped(
        [
            ("king", "queen", "farmer"),
            ("cat", "dog", "chair"),
            ("doctor", "nurse", "river"),
            ("apple", "banana", "hammer"),
            ("car", "truck", "pencil"),
            ("piano", "violin", "window"),
            ("teacher", "professor", "carrot"),
            ("lion", "tiger", "spoon"),
            ("shirt", "jacket", "mountain"),
            ("rose", "tulip", "tractor"),
            ("knife", "fork", "cloud"),
            ("boat", "ship", "lamp"),
            ("coffee", "tea", "brick"),
            ("river", "stream", "laptop"),
            ("cup", "mug", "pillow"),
            ("chair", "sofa", "planet"),
            ("horse", "donkey", "violin"),
            ("rain", "storm", "table"),
            ("bread", "cake", "bicycle"),
            ("soldier", "sailor", "garden"),
            ("city", "town", "kettle"),
            ("pen", "pencil", "camel"),
        ]
    ),
}


def split(pairs: list[MinimalPair]) -> tuple[list[MinimalPair], list[MinimalPair]]:
    """(selection, held_out): the pairs at even places and those at odd places (disjoint)."""
    return pairs[0::2], pairs[1::2]


def sentences() -> list[str]:
    """Every sentence of PAIRS once, in order of appearance."""
    seen: dict[str, None] = {}
    for pairs in PAIRS.values():
        for pair in pairs:
            seen.setdefault(pair.a.sentence)
            seen.setdefault(pair.b.sentence)
    return list(seen)
