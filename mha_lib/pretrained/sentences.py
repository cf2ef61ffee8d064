"""Minimal pairs of sentences with the word links each head role should make (notebook 05).

A `MinimalPair` holds two sentences of one role, each with a hand-marked link
(from-word -> to-word): for "coreference", the pronoun "it" and the noun it
refers to. A marked word is written without punctuation and occurs exactly once
in its sentence (case-insensitive), so it names one place. The two sentences
differ so that the answer moves in a way no positional shortcut can follow:

- coreference: one adjective changes the referent (the animal was too *tired* /
  the street was too *wide*), so "it" must look at a different noun;
- negation: one or two adverbs are inserted between "didn't" and its verb
  ("didn't bark" / "didn't even once bark"; "didn't really remember" / "didn't
  ever really remember");
- preposition and object: one or two words (adjectives, "very") are inserted
  before the noun, and the noun is never the last word ("on the mat all
  afternoon" / "on the old mat all afternoon"; "with friends" / "with old
  friends"; the phrase opens some sentences);
- agreement: a phrase or clause of 2 to 6 words is inserted between the subject
  and its verb (The dogs bark / The dogs next door bark), or one word inside
  such a phrase (The lamp near the windows / near the two windows), and the verb
  is never the last word;
- similarity: the noun of similar meaning and an unrelated noun swap places, in
  four sentence frames, none with a noun at the end.

The positional baselines of `roles` (first word, last word, the word k places
away for k = -4 .. +4) cannot get a pair right: in every pair the to-word sits
at a different distance (in words) from the from-word in the two sentences, or
is a different word, and it is never the first or the last word. So is a null
head's fixed token offset beaten: the inserts between "didn't" and its verb are
never a single word added to none, the one case in which a token offset of -2
from the verb lands inside "didn't" (didn ' t) in both sentences.
`tests/pretrained/test_roles.py` counts every baseline on every role's pairs.

`PAIRS[role]` has 40 pairs; `split(pairs)` cuts them into a selection half (even
places) and a held-out half (odd places), 20 each. Each role's pairs come in
blocks of an even number of the same kind, so both halves get every kind.

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
    change: str  # what differs: "adjective swapped", "words inserted", "nouns swapped"


ROLES = {
    "coreference": "'it' -> the noun it refers to; one adjective changes the referent",
    "negation": "'didn't' -> the verb it negates; adverbs inserted before the verb",
    "preposition": "a preposition -> its object noun; words inserted before the noun",
    "agreement": "a verb -> its subject noun; words inserted between them",
    "object": "a verb -> its object noun; words inserted before the noun",
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


def _inserted(role: str, src: str | None, rows) -> list[MinimalPair]:
    # (sentence with {} where the insert goes, [src,] dst, insert): a = without, b = with
    pairs = []
    for row in rows:
        s, *marks, insert = row
        from_word, dst = (src, *marks) if src is not None else marks
        a = " ".join(s.format("").split())
        b = s.format(insert)
        pairs.append(
            MinimalPair(
                role, Marked(a, from_word, dst), Marked(b, from_word, dst), "words inserted"
            )
        )
    return pairs


# the similarity frames: {src} the from-word, {p} and {q} the similar and the unrelated noun
# (a) or the other way round (b); no noun is the last word, and none starts with a vowel ("a {p}")
FRAMES = (
    "The {src} was next to a {p} and a {q} in the picture.",
    "I saw a {p} and a {q} near the {src} this morning.",
    "The {src} stood between a {p} and a {q} all day long.",
    "Beside the {src} lay a {p}, a box and a {q} on the floor.",
)


def _swapped(rows) -> list[MinimalPair]:
    # (src, similar noun, unrelated noun), 10 to a frame: the two nouns swap places
    pairs = []
    for j, (src, similar, other) in enumerate(rows):
        frame = FRAMES[j // 10]
        a = frame.format(src=src, p=similar, q=other)
        b = frame.format(src=src, p=other, q=similar)
        pairs.append(
            MinimalPair(
                "similarity", Marked(a, src, similar), Marked(b, src, similar), "nouns swapped"
            )
        )
    return pairs


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
            ("The puppy could not lift the box because it was too {}.", "weak puppy", "heavy box"),
            ("The key did not fit in the lock because it was too {}.", "big key", "small lock"),
            (
                "The bridge could not carry the truck because it was too {}.",
                "weak bridge",
                "heavy truck",
            ),
            (
                "The kitten could not reach the shelf because it was too {}.",
                "small kitten",
                "high shelf",
            ),
            (
                "The boat could not pass under the bridge because it was too {}.",
                "tall boat",
                "low bridge",
            ),
            ("The dog could not jump over the wall because it was too {}.", "old dog", "high wall"),
            (
                "The nail would not go into the wall because it was too {}.",
                "blunt nail",
                "hard wall",
            ),
            ("The ice could not hold the deer because it was too {}.", "thin ice", "heavy deer"),
            (
                "The horse could not pull the cart because it was too {}.",
                "weak horse",
                "heavy cart",
            ),
            (
                "The phone did not fit in the pocket because it was too {}.",
                "large phone",
                "small pocket",
            ),
            ("The cake did not fit in the box because it was too {}.", "tall cake", "small box"),
            ("The rug did not cover the floor because it was too {}.", "small rug", "big floor"),
            (
                "The chair would not fit under the desk because it was too {}.",
                "tall chair",
                "low desk",
            ),
            (
                "The basket could not hold the pumpkin because it was too {}.",
                "small basket",
                "big pumpkin",
            ),
            (
                "The mouse could not squeeze through the hole because it was too {}.",
                "fat mouse",
                "tiny hole",
            ),
            (
                "The ship could not enter the harbor because it was too {}.",
                "big ship",
                "shallow harbor",
            ),
            (
                "The picture did not fit in the frame because it was too {}.",
                "large picture",
                "small frame",
            ),
            (
                "The wagon could not cross the river because it was too {}.",
                "heavy wagon",
                "deep river",
            ),
        ]
    ),
    "negation": _inserted(
        "negation",
        "didn't",
        [
            # no adverb / two adverbs: the verb 1 or 3 words after "didn't"
            ("The dog didn't {} bark at the mailman.", "bark", "even once"),
            ("She didn't {} finish her homework on time.", "finish", "ever really"),
            ("They didn't {} lock the front door.", "lock", "even properly"),
            ("He didn't {} call his mother yesterday.", "call", "even once"),
            ("We didn't {} see the movie last night.", "see", "really even"),
            ("The boy didn't {} eat his vegetables at dinner.", "eat", "even really"),
            ("The team didn't {} win a single game.", "win", "ever actually"),
            ("My friend didn't {} answer the phone.", "answer", "really ever"),
            ("The baby didn't {} sleep through the night.", "sleep", "ever fully"),
            ("The bus didn't {} stop at the corner.", "stop", "even briefly"),
            ("The students didn't {} read the book.", "read", "really carefully"),
            ("The farmer didn't {} sell his cows last year.", "sell", "actually ever"),
            ("The store didn't {} open on Sunday.", "open", "even once"),
            ("Our neighbour didn't {} cut the grass this summer.", "cut", "ever properly"),
            ("The child didn't {} touch the cake.", "touch", "even really"),
            ("The driver didn't {} notice the sign.", "notice", "ever really"),
            ("The printer didn't {} print the report this morning.", "print", "even once"),
            ("The guests didn't {} enjoy the dinner.", "enjoy", "all really"),
            ("The cat didn't {} drink its milk.", "drink", "even once"),
            ("The police didn't {} catch the thief.", "catch", "ever actually"),
            # one adverb / two: the verb 2 or 3 words after, the new one before or after the old
            ("The old man didn't {} really remember my name.", "remember", "ever"),
            ("The waiter didn't even {} look at us.", "look", "once"),
            ("My brother didn't {} always wash the dishes.", "wash", "really"),
            ("The teacher didn't really {} explain the rules.", "explain", "clearly"),
            ("The shop didn't {} ever sell fresh bread.", "sell", "really"),
            ("The children didn't even {} try the soup.", "try", "once"),
            ("The train didn't {} actually stop at the station.", "stop", "even"),
            ("The girl didn't {} properly close the window.", "close", "even"),
            ("The company didn't {} always pay its workers on time.", "pay", "really"),
            ("The rain didn't {} completely stop all day.", "stop", "ever"),
            ("My sister didn't {} really like the film.", "like", "ever"),
            ("The doctor didn't even {} ask about the pain.", "ask", "once"),
            ("The players didn't {} properly warm up before the match.", "warm", "ever"),
            ("The machine didn't {} quite work as planned.", "work", "ever"),
            ("The boss didn't {} really read the report.", "read", "even"),
            ("The river didn't {} fully freeze last winter.", "freeze", "even"),
            ("Our team didn't really {} deserve the prize.", "deserve", "ever"),
            ("The kids didn't {} always brush their teeth.", "brush", "really"),
            ("The lawyer didn't {} fully answer the question.", "answer", "ever"),
            ("The plant didn't {} really grow in the shade.", "grow", "ever"),
        ],
    ),
    "preposition": _inserted(
        "preposition",
        None,
        [
            # "P the N" / "P the ADJ N": 2 or 3 words
            ("The cat slept on the {} mat all afternoon.", "on", "mat", "old"),
            ("We walked along the {} river for an hour.", "along", "river", "quiet"),
            ("He hid the key under the {} stone near the gate.", "under", "stone", "flat"),
            ("A man waited at the {} station for his wife.", "at", "station", "busy"),
            ("The children played in the {} garden until dinner.", "in", "garden", "small"),
            ("She put the letter into the {} envelope and sealed it.", "into", "envelope", "white"),
            ("The bird flew over the {} house twice.", "over", "house", "tall"),
            ("They sat beside the {} fire and talked.", "beside", "fire", "warm"),
            ("The book fell behind the {} sofa last week.", "behind", "sofa", "green"),
            ("He swam across the {} lake every morning.", "across", "lake", "cold"),
            ("Through the {} window, the sun was shining.", "through", "window", "open"),
            ("Near the {} bridge, the car stopped suddenly.", "near", "bridge", "old"),
            ("We talked about the {} film over coffee.", "about", "film", "new"),
            ("The lamp hangs above the {} table in the hall.", "above", "table", "round"),
            # "P the N" / "P the ADJ ADJ N": 2 or 4 words
            ("The ball rolled under the {} bed and stopped.", "under", "bed", "big wooden"),
            ("She waited for the {} bus in the rain.", "for", "bus", "very late"),
            ("The dog ran through the {} park after the ball.", "through", "park", "big empty"),
            ("Behind the {} door, the boy was hiding.", "behind", "door", "heavy red"),
            ("The plane flew above the {} clouds for hours.", "above", "clouds", "dark grey"),
            ("He parked beside the {} shop yesterday.", "beside", "shop", "tiny old"),
            ("The cup stood on the {} shelf beside the clock.", "on", "shelf", "top wooden"),
            ("The path led to the {} village past the farm.", "to", "village", "quiet little"),
            # "P the ADJ N" / one more word before or after the adjective: 3 or 4 words
            ("The keys were in the {} top drawer of the desk.", "in", "drawer", "small"),
            ("She sat on the old {} bench by the lake.", "on", "bench", "wooden"),
            ("The fox hid under the dry {} leaves all day.", "under", "leaves", "brown"),
            ("The boys climbed over the {} stone wall after school.", "over", "wall", "high"),
            ("The milk is in the {} white jug on the table.", "in", "jug", "big"),
            ("We had lunch at the {} new cafe near the station.", "at", "cafe", "nice"),
            ("The letter was under the {} blue folder on my desk.", "under", "folder", "thin"),
            ("A cat sat among the {} old boxes in the attic.", "among", "boxes", "dusty"),
            ("They danced around the big {} tree in the square.", "around", "tree", "old"),
            ("The plates are inside the {} kitchen cupboard now.", "inside", "cupboard", "tall"),
            # "P N" / "P ADJ N" or "P ADJ ADJ N": 1, 2 or 3 words
            ("She went out with {} friends on Friday.", "with", "friends", "old"),
            ("He lives near {} mountains in the north.", "near", "mountains", "high"),
            ("The baby slept despite {} noise from the street.", "despite", "noise", "loud"),
            ("They travelled across {} Europe last summer.", "across", "europe", "eastern"),
            ("The soup tastes of {} garlic and lemon.", "of", "garlic", "fresh"),
            ("We ate bread with {} butter every morning.", "with", "butter", "soft"),
            ("The room was full of {} flowers for the party.", "of", "flowers", "bright yellow"),
            ("Without {} help, the project would fail.", "without", "help", "much outside"),
        ],
    ),
    "agreement": _inserted(
        "agreement",
        None,
        [
            # no phrase / a phrase of 2 to 6 words between the subject and its verb
            ("The key {} is missing from the drawer.", "is", "key", "to the cabinets"),
            ("The dogs {} bark loudly at night.", "bark", "dogs", "next door"),
            ("The girl {} runs fast in every race.", "runs", "girl", "with the red shoes"),
            ("The books {} are very old.", "are", "books", "on the top shelf"),
            ("The teacher {} was late again.", "was", "teacher", "of the students"),
            ("The man {} was rich and famous.", "was", "man", "who sold us the cars"),
            ("The boys {} play well together.", "play", "boys", "that the coach trained"),
            ("The woman {} sings beautifully every Sunday.", "sings", "woman", "from the bakery"),
            ("The car {} needs new tires.", "needs", "car", "with the broken lights"),
            ("The flowers {} smell sweet in May.", "smell", "flowers", "in my garden"),
            ("The letter {} was short and clear.", "was", "letter", "from the two lawyers"),
            (
                "The students {} were happy with the talk.",
                "were",
                "students",
                "who met the famous author",
            ),
            (
                "The cake {} tastes good with cream.",
                "tastes",
                "cake",
                "that the children baked yesterday",
            ),
            ("The soldiers {} stand still for an hour.", "stand", "soldiers", "at the gate"),
            (
                "The doctor {} looks tired today.",
                "looks",
                "doctor",
                "who treated all the sick patients",
            ),
            ("The box {} is too heavy to lift.", "is", "box", "under the tables"),
            ("In spring the birds {} sing loudly.", "sing", "birds", "in the tall tree"),
            ("The player {} scores a goal in every game.", "scores", "player", "with blue boots"),
            ("The houses {} look old and empty.", "look", "houses", "along the river road"),
            (
                "The painting {} was sold for a fortune.",
                "was",
                "painting",
                "that the visitors liked",
            ),
            ("The clock {} is broken again.", "is", "clock", "on the wall"),
            ("The musicians {} were tired after the show.", "were", "musicians", "in the band"),
            ("Every morning the bus {} arrives late.", "arrives", "bus", "to the city"),
            ("The children {} are playing outside.", "are", "children", "of my neighbours"),
            # a phrase / the same phrase with one more word
            ("The lamp near the {} windows is broken again.", "is", "lamp", "two"),
            ("The keys to the {} cabinets are missing.", "are", "keys", "old"),
            ("The cat with the {} white paws sleeps all day.", "sleeps", "cat", "small"),
            ("The men at the {} table were laughing loudly.", "were", "men", "next"),
            ("The bottle of {} wine was already open.", "was", "bottle", "red"),
            ("The pictures on the {} wall are beautiful.", "are", "pictures", "kitchen"),
            ("The boy who broke the {} window has left.", "has", "boy", "big"),
            ("The apples in the {} basket taste sweet.", "taste", "apples", "blue"),
            ("The road to the {} villages is closed today.", "is", "road", "mountain"),
            ("The author of the {} books lives in Paris.", "lives", "author", "famous"),
            ("The friends of my {} brother are coming tonight.", "are", "friends", "little"),
            ("The dog that chased the {} cats is sleeping now.", "is", "dog", "two"),
            ("The noise from the {} engines was terrible.", "was", "noise", "old"),
            ("The windows of the {} house were open.", "were", "windows", "white"),
            ("The price of the {} tickets has gone up.", "has", "price", "concert"),
            ("The girls from the {} school sing in a choir.", "sing", "girls", "village"),
        ],
    ),
    "object": _inserted(
        "object",
        None,
        [
            # "V the N" / "V the ADJ N": 2 or 3 words
            ("She read the {} book before bed.", "read", "book", "old"),
            ("He opened the {} door very slowly.", "opened", "door", "heavy"),
            ("They painted the {} fence last weekend.", "painted", "fence", "wooden"),
            ("We bought a {} car from our neighbour.", "bought", "car", "new"),
            ("The boy kicked the {} ball over the wall.", "kicked", "ball", "red"),
            ("The cook cut the {} bread into slices.", "cut", "bread", "fresh"),
            ("My sister wrote a {} letter to her aunt.", "wrote", "letter", "long"),
            ("The farmer fed the {} horses every evening.", "fed", "horses", "hungry"),
            ("The girl found a {} coin under the sofa.", "found", "coin", "shiny"),
            ("He fixed the {} bike in the garage.", "fixed", "bike", "broken"),
            ("They cleaned the {} kitchen after the party.", "cleaned", "kitchen", "dirty"),
            ("The child drew a {} house with a red roof.", "drew", "house", "little"),
            ("We watched the {} game on television.", "watched", "game", "exciting"),
            ("She carried the {} bag up the stairs.", "carried", "bag", "heavy"),
            # "V the N" / "V the ADJ ADJ N": 2 or 4 words
            ("The dog chewed the {} shoe under the table.", "chewed", "shoe", "old leather"),
            ("He washed the {} dishes after dinner.", "washed", "dishes", "big dirty"),
            ("The artist painted a {} portrait of the queen.", "painted", "portrait", "large dark"),
            ("They planted a {} tree in the garden.", "planted", "tree", "small young"),
            (
                "The students answered the {} questions in class.",
                "answered",
                "questions",
                "very difficult",
            ),
            ("She lost her {} keys at the market.", "lost", "keys", "spare car"),
            ("He sold his {} house last spring.", "sold", "house", "big old"),
            ("The cat chased a {} mouse across the yard.", "chased", "mouse", "tiny grey"),
            # "V the ADJ N" / one more word before or after the adjective: 3 or 4 words
            ("She wore a red {} dress to the wedding.", "wore", "dress", "silk"),
            ("He ate the {} hot soup before work.", "ate", "soup", "thick"),
            ("The waiter brought the cold {} drinks to our table.", "brought", "drinks", "fizzy"),
            ("My father built a {} wooden shed behind the house.", "built", "shed", "small"),
            ("The baker sold the last {} loaf to me.", "sold", "loaf", "warm"),
            ("They rented a small {} flat near the park.", "rented", "flat", "cheap"),
            ("The teacher marked the {} final exams over the weekend.", "marked", "exams", "long"),
            ("The wind broke the big {} window in the attic.", "broke", "window", "old"),
            ("She lit the {} white candles on the cake.", "lit", "candles", "tall"),
            (
                "The hunter followed the {} fresh tracks into the forest.",
                "followed",
                "tracks",
                "deep",
            ),
            # "V N" / "V ADJ N" or "V ADJ ADJ N": 1, 2 or 3 words
            ("The children eat {} apples every day.", "eat", "apples", "green"),
            ("She grows {} tomatoes in her garden.", "grows", "tomatoes", "red"),
            ("He drinks {} coffee in the morning.", "drinks", "coffee", "black"),
            ("They sell {} shoes at the market.", "sell", "shoes", "cheap"),
            ("We collect {} stamps as a hobby.", "collect", "stamps", "old"),
            ("The bakery makes {} bread on weekdays.", "makes", "bread", "fresh brown"),
            ("Farmers need {} rain in the spring.", "need", "rain", "more"),
            ("My uncle repairs {} clocks for a living.", "repairs", "clocks", "antique wall"),
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
            ("wolf", "fox", "candle"),
            ("sparrow", "pigeon", "ladder"),
            ("onion", "carrot", "blanket"),
            ("jacket", "sweater", "bucket"),
            ("eagle", "hawk", "sofa"),
            ("nephew", "niece", "rocket"),
            ("lizard", "snake", "teapot"),
            ("trumpet", "flute", "carpet"),
            ("shoe", "boot", "cloud"),
            ("bus", "train", "shirt"),
            ("milk", "juice", "rope"),
            ("sheep", "goat", "spoon"),
            ("forest", "jungle", "button"),
            ("brother", "sister", "kettle"),
            ("road", "street", "puppet"),
            ("desk", "table", "mirror"),
            ("finger", "thumb", "bridge"),
            ("wheat", "corn", "pillow"),
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
