"""Word lists and sentence templates of the LongMemEval-format generator
(:mod:`memroute.eval.longmemeval_synth`).

Pure data plus the value makers the templates use; the generator logic lives in
``longmemeval_synth.py``. Any change here changes the generated set for every seed. A template's
``{slots}`` are filled from its ``values`` callable (planted facts) or from the session's slot
dict (:func:`filler_slots`, chit-chat).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Exchange = tuple[str, str]  # (user text, assistant text)
Values = Callable[[random.Random], dict[str, str]]

NOT_ENOUGH = "The information provided is not enough."
MONTHS = (
    "January February March April May June July August September October November December"
).split()

PEOPLE = (
    "Beatrix Cormac Delphine Emeka Fiona Gideon Halima Ignatius Jolene Kasimir Lorena Magnus "
    "Nadia Orla Piotr Rosalind Saoirse Thaddeus Ulrike Viggo Xavier Yusuf Zofia Anselm Bettina "
    "Cyrus Dagny Evander Gunnar Honora Ivo Jessamy Lysander Mireille Niamh Octavia Percival"
).split()
SURNAMES = (
    "Okafor Lindqvist Moreau Castellano Nakamura Brennan Haddad Kowalski Abernathy Fairweather "
    "Quintero Thornbury Ashdown Delacroix Ferreira Gallagher Holmberg Iverson Marchetti Pemberton"
).split()
CITIES = (
    "Lisbon", "Porto", "Valencia", "Krakow", "Ljubljana", "Tallinn", "Bergen", "Ghent", "Bologna",
    "Seville", "Tbilisi", "Montreal", "Halifax", "Oaxaca", "Cusco", "Hobart", "Wellington",
    "Kyoto", "Busan", "Hanoi", "Marrakesh", "Reykjavik", "Edinburgh", "Galway", "Salzburg",
    "Lyon", "Bordeaux", "Asheville", "Boise", "Tucson", "Savannah", "Duluth", "Madison",
    "Spokane", "Burlington", "Santa Fe", "Providence",
)
COUNTRIES = (
    "Portugal", "Japan", "Morocco", "Iceland", "Vietnam", "Peru", "Georgia", "Slovenia",
    "Estonia", "Norway", "Mexico", "Chile", "Greece", "Croatia", "Jordan", "Kenya", "Canada",
    "Ireland", "Austria", "Colombia",
)
NAME_WORDS = (
    "Juniper Harborview Larkspur Copperleaf Bluebell Ironwood Saltmarsh Windrose Foxglove "
    "Alderbrook Lantern Stonegate Thistle Marigold Driftwood Kestrel Brambleton Oakhaven "
    "Silverpine Wrenfield Sunfield Tidewater Hollowell Ashcombe Fernhill Quillon"
).split()
TITLE_ADJ = (
    "Silent Hollow Crimson Distant Forgotten Paper Salt Winter Glass Quiet Burning Northern "
    "Patient Lantern Midnight Borrowed Drowned Amber"
).split()
TITLE_NOUN = (
    "Orchard Harbor Cartographer Lighthouse Archive Meridian Garden Tide Ledger Observatory "
    "Ferryman Atlas Quarry Orchestra Apiary Causeway"
).split()
FIELDS = (
    "Marine Biology", "Civil Engineering", "Art History", "Statistics", "Nursing", "Linguistics",
    "Environmental Science", "Economics", "Mechanical Engineering", "Philosophy", "Chemistry",
    "Graphic Design", "Public Health", "Computer Science", "Anthropology", "Architecture",
)
LANGUAGES = ("Portuguese", "Japanese", "Korean", "Italian", "Dutch", "Turkish", "Swahili",
             "Polish", "Greek", "Hungarian", "Mandarin", "Finnish")
INSTRUMENTS = ("cello", "piano", "violin", "banjo", "trumpet", "drum", "flute", "ukulele",
               "saxophone", "harp")
BREEDS = ("beagle", "corgi", "greyhound", "poodle", "dachshund", "whippet", "spaniel",
          "terrier", "husky", "labrador")
PET_NAMES = (
    "Biscuit Pepper Mochi Waffles Ziggy Clementine Nacho Pickles Marble Sprocket Noodle Basil "
    "Pretzel Cosmo Hazel Dumpling Rocket Maple Toffee Quincy Sesame Fennel Gizmo Paprika Chutney"
).split()
COLORS = ("teal", "matte black", "burgundy", "olive green", "silver", "orange", "navy")
BIKE_BRANDS = ("Trek", "Cannondale", "Specialized", "Giant", "Bianchi", "Canyon", "Orbea")
CUISINES = {
    "Thai": ("green curry", "pad see ew", "tom kha soup"),
    "Ethiopian": ("misir wot", "injera with lentils", "doro wat"),
    "Mexican": ("chilaquiles", "mole poblano", "black bean tacos"),
    "Korean": ("bibimbap", "kimchi stew", "japchae"),
    "Lebanese": ("fattoush", "mujadara", "stuffed grape leaves"),
    "Italian": ("risotto", "cacio e pepe", "minestrone"),
    "Indian": ("chana masala", "palak paneer", "dal makhani"),
    "Japanese": ("okonomiyaki", "miso ramen", "katsu curry"),
}
VEGETABLES = ("butternut squash", "cauliflower", "beetroot", "brussels sprouts", "carrots",
              "sweet potato", "fennel", "eggplant")
SUBJECTS = ("astronomy", "personal finance", "Roman history", "urban planning", "psychology",
            "climate science", "typography", "behavioral economics", "linguistics")
HOBBIES = ("fly fishing", "woodworking", "birdwatching", "vinyl collecting", "chess",
           "sailing", "baking bread", "model trains", "gardening")
GIFTS = ("a hand-tied fly kit", "a dovetail saw", "a pair of compact binoculars",
         "a record cleaning kit", "a walnut chess set", "a waterproof deck bag",
         "a proofing basket", "a vintage rail map", "a kneeling pad and trowel set")
SOFTWARE = ("Lightroom", "Capture One", "darktable", "Affinity Photo", "DaVinci Resolve",
            "GIMP")
ACTIVITIES = ("trail running", "open-water swimming", "cycling", "rock climbing", "rowing",
              "hiking")
MUSIC = {
    "jazz": ("Bill Evans", "Alice Coltrane"), "bluegrass": ("Billy Strings", "Alison Krauss"),
    "synth-pop": ("Chvrches", "Robyn"), "Afrobeat": ("Fela Kuti", "Tony Allen"),
    "bossa nova": ("Joao Gilberto", "Astrud Gilberto"),
    "post-rock": ("Mogwai", "Explosions in the Sky"),
}
PLACES = ("coastal", "mountain", "lakeside", "countryside", "island")
BOOK_GENRES = ("mystery", "science fiction", "historical fiction", "fantasy", "thriller")
JOB_LADDER = (
    ("junior data analyst", "senior data analyst"), ("staff nurse", "charge nurse"),
    ("associate designer", "lead designer"), ("software engineer", "engineering manager"),
    ("sous chef", "head chef"), ("assistant editor", "managing editor"),
    ("sales associate", "store manager"), ("research assistant", "lab manager"),
    ("paralegal", "associate attorney"), ("teaching assistant", "lecturer"),
)
CARS = ("Honda Civic", "Toyota Corolla", "Subaru Outback", "Mazda 3", "Kia Niro",
        "Volkswagen Golf", "Hyundai Ioniq 5", "Ford Escape", "Tesla Model 3", "Volvo XC40")
ITEMS = ("succulents", "jars of honey", "vinyl records", "pairs of running socks", "board games",
         "bags of coffee beans", "picture frames", "houseplant pots")
STORES = ("the farmers market", "the flea market", "a garage sale", "the mall", "an online shop",
          "the corner store", "a craft fair")
PROJECTS = {
    "bathroom renovation": ("tiles", "a new vanity", "grout and sealant", "a mirror cabinet"),
    "garden makeover": ("raised beds", "topsoil", "a drip irrigation kit", "perennials"),
    "home office setup": ("a standing desk", "a monitor arm", "an ergonomic chair", "a desk lamp"),
    "wedding planning": ("the venue deposit", "invitations", "flowers", "the photographer"),
}
VOLUNTEER = ("the animal shelter", "the food bank", "the community garden",
             "the public library", "the youth soccer league")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _title(r: random.Random) -> str:
    return f"The {r.choice(TITLE_ADJ)} {r.choice(TITLE_NOUN)}"


def _money(r: random.Random, lo: int, hi: int, step: int = 5) -> int:
    return r.randrange(lo, hi + 1, step)


@dataclass(frozen=True)
class Fact:
    """A fact stated in one session (or, for knowledge updates, stated in one and changed in a
    later one) and the questions about it. ``abs_question`` asks about something the values only
    come near (never planted); ``""`` means the fact has no abstention form."""

    key: str
    values: Values
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str
    distract: tuple[Exchange, ...] = ()  # the same words with other values, in filler sessions
    abs_question: str = ""
    abs_answer: str = ""
    old_user: tuple[str, ...] = ()  # knowledge updates: the earlier, superseded statement
    old_assistant: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tally:
    """Multi-session: each of 2-3 sessions adds a part; the answer sums ``n`` or counts parts."""

    key: str
    shared: Values  # values common to all parts (the item, the project...)
    part: Callable[[random.Random, dict[str, str]], dict[str, str]]  # one part; has "n"
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str  # uses {total} (sum of n) or {count}
    abs_question: str
    abs_answer: str


@dataclass(frozen=True)
class Event:
    """Temporal reasoning: something the user did on the session's day."""

    key: str
    values: Values
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    phrase: str  # completes "the day I ...": "got my car serviced"
    noun: str  # "the car service"


# ---------------------------------------------------------------- single-session-user
def _hotel(r: random.Random) -> dict[str, str]:
    city, city2 = r.sample(CITIES, 2)
    kind = r.choice(("Hotel", "Inn", "Lodge", "Guesthouse"))
    return {"city": city, "city2": city2, "hotel": f"{r.choice(NAME_WORDS)} {kind}",
            "person": r.choice(PEOPLE)}


def _degree(r: random.Random) -> dict[str, str]:
    return {"field": r.choice(FIELDS), "uni": f"the University of {r.choice(CITIES)}"}


def _commute(r: random.Random) -> dict[str, str]:
    return {"n": str(r.randrange(15, 95, 5)), "line": r.choice(("Red", "Blue", "Green", "Orange",
                                                                   "Silver", "Purple"))}


def _pet(r: random.Random) -> dict[str, str]:
    return {"breed": r.choice(BREEDS), "pet": r.choice(PET_NAMES)}


def _bike(r: random.Random) -> dict[str, str]:
    return {"color": r.choice(COLORS), "brand": r.choice(BIKE_BRANDS),
            "price": f"${_money(r, 450, 2400, 10):,}"}


def _birthday(r: random.Random) -> dict[str, str]:
    return {"person": r.choice(PEOPLE), "date": f"{r.choice(MONTHS)} {r.randint(1, 28)}"}


def _language(r: random.Random) -> dict[str, str]:
    lang, lang2 = r.sample(LANGUAGES, 2)
    return {"lang": lang, "lang2": lang2, "n": str(r.randint(3, 30))}


def _teacher(r: random.Random) -> dict[str, str]:
    inst, inst2 = r.sample(INSTRUMENTS, 2)
    return {"inst": inst, "inst2": inst2, "person": f"{r.choice(PEOPLE)} {r.choice(SURNAMES)}"}


SINGLE_USER: tuple[Fact, ...] = (
    Fact("hotel", _hotel,
         ("I just got back from a long weekend in {city}. We stayed at the {hotel} and the "
          "breakfast was great. Can you help me write a short review?",
          "Could you help me plan a day of sightseeing? I'm staying at the {hotel} in {city} "
          "until Sunday."),
         ("Happy to! Draft: 'Our stay at the {hotel} in {city} was relaxing, the staff were "
          "friendly and breakfast was a highlight.' Add a detail or two of your own.",
          "Sure. Since you're based in {city}, start early with the old town, keep the "
          "afternoon flexible and book dinner near your hotel."),
         ("Which hotel did I stay at in {city}?",
          "What was the name of the place I stayed at during my trip to {city}?"),
         "{hotel}",
         (("My friend {person} keeps recommending the {hotel} in {city}. Worth it?",
           "It gets good reviews; compare the location and price with a couple of options."),),
         "Which hotel did I stay at in {city2}?",
         NOT_ENOUGH + " You mentioned staying at the {hotel} in {city}, but not a trip to "
         "{city2}."),
    Fact("degree", _degree,
         ("Some background before you explain: I graduated with a degree in {field} from {uni}, "
          "so you can keep it technical.",
          "I have a {field} degree from {uni}, but I'm thinking about switching careers. Where "
          "should I start?"),
         ("Thanks, with a {field} background I'll skip the basics.",
          "A {field} degree gives you transferable skills; start by listing the tasks you "
          "enjoyed most and look for roles built around them."),
         ("What did I get my degree in?", "What did I study at university?"),
         "{field}",
         (("Is a degree in {field} worth it these days?",
           "It depends on your goals; talk to people working in the field first."),),
         "What did I get my master's degree in?",
         NOT_ENOUGH + " You mentioned a degree in {field}, but not a master's degree."),
    Fact("commute", _commute,
         ("My commute is {n} minutes each way on the {line} Line. Can you suggest podcasts "
          "that fit that length?",
          "I spend {n} minutes each way on the {line} Line train, how can I use that time "
          "better?"),
         ("Episodes of about {n} minutes would fit your ride on the {line} Line nicely; try "
          "short history or science shows.",
          "{n} minutes each way adds up! Audiobooks, language drills or planning your day all "
          "work well on a train."),
         ("How long is my commute each way?", "How many minutes does my train ride to work take?"),
         "{n} minutes",
         (("The {line} Line has delays again, is it faster to take the bus?",
           "Check the live map; buses often win during signal problems."),),
         "How much does my monthly transit pass cost?",
         NOT_ENOUGH + " You mentioned a {n}-minute commute on the {line} Line, but not the price "
         "of a transit pass."),
    Fact("pet", _pet,
         ("Our {breed} {pet} keeps chewing the couch cushions. Any training tips?",
          "I need a vet checklist for {pet}, our {breed}, before the annual visit."),
         ("For a {breed} like {pet}, offer chew toys, redirect calmly and exercise more.",
          "For {pet}'s checkup, note appetite, weight changes, and any coughing or limping."),
         ("What is my {breed}'s name?", "What's the name of our dog?"),
         "{pet}",
         (("My neighbour's {breed} barks all night. How do I bring it up politely?",
           "Be friendly and specific; suggest a time to talk rather than complaining."),),
         "What is my cat's name?",
         NOT_ENOUGH + " You mentioned your {breed} {pet}, but not a cat."),
    Fact("bike", _bike,
         ("I bought a {color} {brand} road bike last week for {price}. How often should I get "
          "it serviced?",),
         ("For a new road bike, a first tune-up after a month and then every six months works.",
          ),
         ("How much did I pay for my road bike?", "What did my new bike cost?"),
         "{price}",
         (("Is a {brand} road bike good value at {price}?",
           "It can be; check the groupset and wheels against similar models."),),
         "How much did I pay for my bike helmet?",
         NOT_ENOUGH + " You mentioned your {price} {brand} road bike, but not a helmet."),
    Fact("birthday", _birthday,
         ("My sister {person}'s birthday is on {date} and I want to plan a surprise picnic. "
          "Ideas?",),
         ("A picnic is lovely! Pick a shady park, pack her favourite snacks and invite a few "
          "close friends.",),
         ("When is my sister's birthday?", "On what date is my sister's birthday?"),
         "{date}",
         (("My colleague's birthday is {date}, what's a safe office gift?",
           "A nice notebook or good chocolate rarely goes wrong."),),
         "When is my brother's birthday?",
         NOT_ENOUGH + " You mentioned your sister {person}'s birthday on {date}, but not your "
         "brother's."),
    Fact("language", _language,
         ("I've been studying {lang} for {n} months with flashcards and I'm stuck on verb "
          "tenses.",),
         ("{n} months in, verb tenses are a normal wall. Practise one tense a week in short "
          "written diaries.",),
         ("How long have I been studying {lang}?",),
         "{n} months",
         (("Is {lang} harder than Spanish for English speakers?",
           "Usually yes, mostly because of grammar and fewer shared words."),),
         "How long have I been studying {lang2}?",
         NOT_ENOUGH + " You mentioned studying {lang} for {n} months, but not {lang2}."),
    Fact("teacher", _teacher,
         ("My {inst} teacher, {person}, says I should practise scales every day. Is that "
          "really necessary?",),
         ("Your teacher has a point: ten minutes of scales a day builds finger memory fast.",),
         ("What is the name of my {inst} teacher?", "Who teaches me {inst}?"),
         "{person}",
         (("How do I find a good {inst} teacher?",
           "Ask for a trial lesson and see whether they explain the why, not only the what."),),
         "What is the name of my {inst2} teacher?",
         NOT_ENOUGH + " You mentioned your {inst} teacher {person}, but not a {inst2} teacher."),
)


# ---------------------------------------------------------------- single-session-assistant
def _book(r: random.Random) -> dict[str, str]:
    return {"genre": r.choice(BOOK_GENRES), "title": _title(r),
            "author": f"{r.choice(PEOPLE)} {r.choice(SURNAMES)}"}


def _restaurant(r: random.Random) -> dict[str, str]:
    cuisine = r.choice(sorted(CUISINES))
    return {"city": r.choice(CITIES), "cuisine": cuisine, "dish": r.choice(CUISINES[cuisine]),
            "restaurant": f"{r.choice(NAME_WORDS)} {r.choice(('Kitchen', 'Table', 'House'))}"}


def _roast(r: random.Random) -> dict[str, str]:
    return {"veg": r.choice(VEGETABLES), "temp": str(r.choice((180, 190, 200, 220))),
            "n": str(r.randrange(20, 60, 5))}


def _trail(r: random.Random) -> dict[str, str]:
    return {"city": r.choice(CITIES), "trail": f"{r.choice(NAME_WORDS)} Ridge Trail",
            "km": str(r.randint(4, 16))}


def _business(r: random.Random) -> dict[str, str]:
    thing = r.choice(("candle", "dog-walking", "bakery", "bookbinding", "bike repair", "tutoring"))
    return {"thing": thing, "biz": f"{r.choice(NAME_WORDS)} & {r.choice(TITLE_NOUN)}"}


def _podcast(r: random.Random) -> dict[str, str]:
    return {"subject": r.choice(SUBJECTS),
            "podcast": f"{r.choice(TITLE_ADJ)} {r.choice(TITLE_NOUN)} Radio"}


def _workout(r: random.Random) -> dict[str, str]:
    ex = r.sample(("squats", "push-ups", "lunges", "plank holds", "burpees", "glute bridges"), 2)
    return {"n": str(r.randint(3, 9)), "ex1": ex[0], "ex2": ex[1]}


def _gift(r: random.Random) -> dict[str, str]:
    i = r.randrange(len(HOBBIES))
    return {"hobby": HOBBIES[i], "gift": GIFTS[i]}


SINGLE_ASSISTANT: tuple[Fact, ...] = (
    Fact("book", _book,
         ("Can you recommend a {genre} novel for a long flight?",),
         ("I'd recommend '{title}' by {author}: a tightly plotted {genre} story that's hard to "
          "put down.",),
         ("What {genre} novel did you recommend for my flight?",
          "I'm going back to our chat about books for my flight. Which one did you suggest?"),
         "'{title}' by {author}",
         (("Have you heard of '{title}'? My book club picked it.",
           "It has a loyal following; the middle drags a little, but the ending pays off."),),
         "Which poetry collection did you recommend to me?",
         NOT_ENOUGH + " I recommended the {genre} novel '{title}' by {author}, but not a poetry "
         "collection."),
    Fact("restaurant", _restaurant,
         ("I'm visiting {city} next month. Where should I eat good {cuisine} food?",),
         ("Try {restaurant}, near the old town; their {dish} is the local favourite. Book ahead "
          "on weekends.",),
         ("Which restaurant in {city} did you suggest for {cuisine} food?",
          "What was the name of the {cuisine} place you told me about for my {city} trip?"),
         "{restaurant}",
         (("Is {restaurant} in {city} any good?",
           "I can't vouch for current quality; check recent reviews."),),
         "Which restaurant in {city} did you suggest for breakfast?",
         NOT_ENOUGH + " I suggested {restaurant} for {cuisine} food in {city}, but not a "
         "breakfast place."),
    Fact("roast", _roast,
         ("How long should I roast {veg} at {temp} degrees?",),
         ("About {n} minutes at {temp} degrees, turning once halfway, until the edges "
          "caramelise.",),
         ("How long did you tell me to roast the {veg}?",),
         "{n} minutes",
         (("My {veg} came out soggy. What went wrong?",
           "Probably a crowded tray; spread them out so they roast instead of steaming."),),
         "How long did you tell me to boil the {veg}?",
         NOT_ENOUGH + " I told you to roast the {veg} for {n} minutes, but nothing about "
         "boiling."),
    Fact("trail", _trail,
         ("Can you suggest an easy hike near {city} for a Saturday morning?",),
         ("The {trail} is a gentle {km} km loop with a lookout halfway; start early to avoid "
          "crowds.",),
         ("Which trail did you suggest near {city}?",
          "Remind me of the hike you recommended around {city}?"),
         "{trail}",
         (("Is the {trail} muddy in spring?",
           "Often, yes; waterproof boots are a good idea after rain."),),
         "Which campsite did you suggest near {city}?",
         NOT_ENOUGH + " I suggested the {trail} near {city}, but not a campsite."),
    Fact("business", _business,
         ("I'm starting a small {thing} business. Can you suggest a name?",),
         ("How about '{biz}'? It's short, memorable and the domain is likely free.",),
         ("What name did you suggest for my {thing} business?",),
         "{biz}",
         (("My cousin called her shop '{biz}', is that a good name?",
           "It's distinctive, which matters more than being descriptive."),),
         "What logo colours did you suggest for my {thing} business?",
         NOT_ENOUGH + " I suggested the name '{biz}' for your {thing} business, but no logo "
         "colours."),
    Fact("podcast", _podcast,
         ("Is there a beginner-friendly podcast about {subject}?",),
         ("'{podcast}' is a great start: short episodes, clear explanations, no jargon.",),
         ("Which podcast did you recommend about {subject}?",),
         "{podcast}",
         (("Someone mentioned '{podcast}', what is it about?",
           "I'm not certain; the episode list should tell you quickly."),),
         "Which documentary did you recommend about {subject}?",
         NOT_ENOUGH + " I recommended the podcast '{podcast}' about {subject}, but not a "
         "documentary."),
    Fact("workout", _workout,
         ("Give me a quick morning workout I can do in my living room.",),
         ("Do {n} rounds of 12 {ex1} and 10 {ex2}, resting a minute between rounds.",),
         ("How many rounds of the morning workout did you suggest?",),
         "{n}",
         (("Are {ex1} bad for my knees?",
           "Not with good form; keep your knees tracking over your toes."),),
         "How many rounds of the evening stretching routine did you suggest?",
         NOT_ENOUGH + " I suggested {n} rounds of a morning workout, but no evening stretching "
         "routine."),
    Fact("gift", _gift,
         ("What should I get my dad for his birthday? He loves {hobby}.",),
         ("For someone into {hobby}, {gift} would be a thoughtful choice.",),
         ("What gift did you suggest for my dad?",),
         "{gift}",
         (("My friend is into {hobby}, any gift under twenty dollars?",
           "A good book on it or a small accessory works."),),
         "What gift did you suggest for my mom?",
         NOT_ENOUGH + " I suggested {gift} for your dad, but nothing for your mom."),
)


# ---------------------------------------------------------------- single-session-preference
def _cooking(r: random.Random) -> dict[str, str]:
    cuisine = r.choice(sorted(CUISINES))
    return {"cuisine": cuisine, "dish": r.choice(CUISINES[cuisine]),
            "avoid": r.choice(("dairy", "deep-fried food", "very spicy food", "pork"))}


def _music(r: random.Random) -> dict[str, str]:
    genre = r.choice(sorted(MUSIC))
    return {"genre": genre, "artist": r.choice(MUSIC[genre])}


def _reading(r: random.Random) -> dict[str, str]:
    return {"genre": r.choice(BOOK_GENRES),
            "trait": r.choice(("unreliable narrators", "found-family casts", "slow-burn plots",
                               "short chapters", "morally grey heroes"))}


PREFERENCE: tuple[Fact, ...] = (
    Fact("cooking", _cooking,
         ("I've been cooking a lot of {cuisine} food lately, {dish} especially, and I try to "
          "avoid {avoid}.",),
         ("{cuisine} cooking is a great habit, and {dish} is a good dish to master.",),
         ("Can you suggest something for dinner tonight?", "Any ideas for a weeknight meal?"),
         "The user would prefer {cuisine} dishes, something like {dish}, without {avoid}. They "
         "might not prefer generic recipes from other cuisines or ones with {avoid}."),
    Fact("photo", lambda r: {"software": r.choice(SOFTWARE)},
         ("I edit all my photos in {software} and I'm comfortable with its advanced tools.",),
         ("{software} is powerful once you know it; masks and presets save lots of time.",),
         ("Can you recommend resources to improve my photo editing?",),
         "The user would prefer resources tailored to {software}, especially its advanced "
         "features. They might not prefer general editing tips or guides for other software."),
    Fact("exercise", lambda r: {"activity": r.choice(ACTIVITIES)},
         ("I really enjoy {activity}; gyms feel claustrophobic to me.",),
         ("Then keep it outdoors! {activity} is great for both fitness and mood.",),
         ("What should I do to stay active this month?",),
         "The user would prefer outdoor activities such as {activity} rather than gym-based "
         "workouts. They might not prefer indoor gym routines."),
    Fact("music", _music,
         ("Lately I can't stop listening to {genre}, especially {artist}.",),
         ("{artist} is a great entry point into {genre}.",),
         ("Can you suggest some music for my commute?",),
         "The user would prefer {genre} music, similar to {artist}. They might not prefer "
         "unrelated genres or generic chart playlists."),
    Fact("travel", lambda r: {"place": r.choice(PLACES)},
         ("I prefer quiet {place} places over big cities, and I take the train whenever I can.",),
         ("Slow travel by train to {place} spots can be very restful.",),
         ("Where should I go for my next vacation?",),
         "The user would prefer quiet {place} destinations reachable by train. They might not "
         "prefer busy city breaks or trips that require flying."),
    Fact("reading", _reading,
         ("I love {genre} books, especially ones with {trait}.",),
         ("Good taste! {trait} make {genre} much more fun.",),
         ("Any book suggestions for the weekend?",),
         "The user would prefer {genre} books with {trait}. They might not prefer books from "
         "other genres or without {trait}."),
)


# ---------------------------------------------------------------- knowledge-update
def _pb(r: random.Random) -> dict[str, str]:
    old = r.randint(24 * 60, 34 * 60)
    new = old - r.randint(20, 150)
    return {"old": f"{old // 60}:{old % 60:02d}", "new": f"{new // 60}:{new % 60:02d}"}


def _job(r: random.Random) -> dict[str, str]:
    old, new = r.choice(JOB_LADDER)
    kind = r.choice(("Labs", "Health", "Media", "Logistics"))
    return {"old": old, "new": new, "company": f"{r.choice(NAME_WORDS)} {kind}",
            "person": r.choice(PEOPLE)}


def _plants(r: random.Random) -> dict[str, str]:
    old = r.randint(5, 18)
    return {"old": str(old), "new": str(old + r.randint(2, 9))}


def _moved(r: random.Random) -> dict[str, str]:
    old, new = r.sample(CITIES, 2)
    return {"old": old, "new": new}


def _gym(r: random.Random) -> dict[str, str]:
    old = r.randrange(25, 70)
    return {"old": f"${old}", "new": f"${old + r.randint(3, 15)}"}


def _reading_now(r: random.Random) -> dict[str, str]:
    old, new = _title(r), _title(r)
    return {"old": old, "new": new if new != old else f"{new} Returns"}


def _car(r: random.Random) -> dict[str, str]:
    old, new = r.sample(CARS, 2)
    return {"old": old, "new": new}


def _savings(r: random.Random) -> dict[str, str]:
    old = _money(r, 400, 3000, 50)
    return {"old": f"${old:,}", "new": f"${old + _money(r, 300, 2000, 50):,}",
            "trip": r.choice(COUNTRIES)}


KNOWLEDGE_UPDATE: tuple[Fact, ...] = (
    Fact("5k", _pb,
         ("New personal best in the 5k today: {new}! How do I keep improving?",),
         ("Congratulations on {new}! Add one interval session a week and keep the rest easy.",),
         ("What is my current 5k personal best?", "What's my best 5k time now?"),
         "{new}",
         (("My running buddy ran a 5k in {new}, is that fast?",
           "That's a solid recreational time."),),
         "What is my current 10k personal best?",
         NOT_ENOUGH + " You mentioned your 5k personal best of {new}, but not a 10k time.",
         ("My 5k personal best is {old}. What training plan would help me get faster?",),
         ("From {old}, a plan with one tempo run and one interval session a week works well.",)),
    Fact("job", _job,
         ("I got promoted! I'm now {new} at {company}. Any advice for the first month?",),
         ("Congratulations on becoming {new}! Spend the first weeks listening and setting "
          "expectations.",),
         ("What is my current job title?", "What's my role at work now?"),
         "{new}",
         (("My friend {person} just became a {new} at another company. What should I get her?",
           "A nice notebook or a celebratory dinner both say congratulations."),),
         "How much is my current salary?",
         NOT_ENOUGH + " You mentioned your promotion to {new} at {company}, but not your salary.",
         ("I work as a {old} at {company} and I want to ask for more responsibility.",),
         ("As a {old}, propose a concrete project you'd like to own.",)),
    Fact("plants", _plants,
         ("My houseplant collection is up to {new} now! How do I keep track of watering?",),
         ("With {new} plants, a simple watering calendar or an app will save you.",),
         ("How many houseplants do I have now?",),
         "{new}",
         (("My neighbour has {new} houseplants on one windowsill, is that too many?",
           "As long as they get light and airflow, it's fine."),),
         "How many succulents do I have now?",
         NOT_ENOUGH + " You mentioned having {new} houseplants, but not how many are succulents.",
         ("I have {old} houseplants in my apartment. Which ones need the most light?",),
         ("With {old} plants, group the sun-lovers by the brightest window.",)),
    Fact("city", _moved,
         ("We finally moved to {new} last weekend! What should I set up first?",),
         ("Welcome to {new}! Update your address, find a doctor and explore your "
          "neighbourhood.",),
         ("Which city do I live in now?", "Where do I live these days?"),
         "{new}",
         (("Is {new} expensive to live in?", "Housing is the main cost; the rest is moderate."),),
         "Which neighbourhood of {new} do I live in?",
         NOT_ENOUGH + " You mentioned moving to {new}, but not which neighbourhood.",
         ("I live in {old}, and the rent keeps going up. Should I consider moving?",),
         ("Compare rents in nearby areas of {old} before deciding.",)),
    Fact("gym", _gym,
         ("My gym just raised my membership to {new} a month. Is that still worth it?",),
         ("At {new} a month, it's worth it if you go at least twice a week.",),
         ("How much do I pay for my gym membership per month now?",),
         "{new}",
         (("A friend pays {new} a month for a climbing gym, is that normal?",
           "Climbing gyms often cost more than regular ones, so yes."),),
         "How much do I pay for my yoga classes?",
         NOT_ENOUGH + " You mentioned your gym membership of {new} a month, but not yoga "
         "classes.",
         ("My gym membership costs {old} a month. How can I make the most of it?",),
         ("At {old} a month, book the classes you'd otherwise pay extra for.",)),
    Fact("book-now", _reading_now,
         ("I started reading '{new}' this week and I can't put it down.",),
         ("'{new}' sounds gripping! Enjoy it.",),
         ("What book am I currently reading?",),
         "{new}",
         (("Have you heard of '{new}'?", "Only a little; it seems to be getting attention."),),
         "What audiobook am I listening to?",
         NOT_ENOUGH + " You mentioned reading '{new}', but not an audiobook.",
         ("I'm halfway through '{old}'. Any tips to read more consistently?",),
         ("Reading a few pages of '{old}' at the same time each day builds the habit.",)),
    Fact("car", _car,
         ("I traded in my old car for a {new} today. What maintenance should I plan?",),
         ("Nice, a {new}! Follow the manual's service schedule and check tyre pressure "
          "monthly.",),
         ("What car do I drive now?",),
         "{new}",
         (("Is the {new} reliable?", "It generally has good reliability ratings."),),
         "What colour is my car?",
         NOT_ENOUGH + " You mentioned driving a {new}, but not its colour.",
         ("I drive a {old} and it's getting old. When is it worth replacing?",),
         ("If repairs on the {old} cost more than a year of payments, consider replacing it.",)),
    Fact("savings", _savings,
         ("My savings for the {trip} trip are now at {new}! Am I on track?",),
         ("{new} is great progress for {trip}; keep the automatic transfers going.",),
         ("How much have I saved for my {trip} trip so far?",),
         "{new}",
         (("How much should I budget for two weeks in {trip}?",
           "It varies a lot; accommodation is the biggest factor."),),
         "How much have I saved for a new laptop?",
         NOT_ENOUGH + " You mentioned saving {new} for the {trip} trip, but not for a laptop.",
         ("I've saved {old} toward a trip to {trip}. How can I save faster?",),
         ("From {old}, automate a weekly transfer and cut one subscription.",)),
)


# ---------------------------------------------------------------- multi-session
def _item_shared(r: random.Random) -> dict[str, str]:
    item, item2 = r.sample(ITEMS, 2)
    return {"item": item, "item2": item2}


def _project_shared(r: random.Random) -> dict[str, str]:
    project, other = r.sample(sorted(PROJECTS), 2)
    return {"project": project, "project2": other}


def _project_part(r: random.Random, s: dict[str, str]) -> dict[str, str]:
    n = _money(r, 80, 1500, 10)
    return {"n": str(n), "money": f"${n:,}", "thing": r.choice(PROJECTS[s["project"]])}


MULTI_SESSION: tuple[Tally, ...] = (
    Tally("items", _item_shared,
          lambda r, s: {"n": str(r.randint(2, 9)), "store": r.choice(STORES)},
          ("I picked up {n} {item} at {store} today. How should I store them?",
           "Got {n} more {item} from {store} this morning, I couldn't resist."),
          ("Nice find! Keep them somewhere cool and dry.", "Sounds like a good haul!"),
          ("How many {item} did I buy in total?", "How many {item} have I bought altogether?"),
          "{total}",
          "How many {item2} did I buy in total?",
          NOT_ENOUGH + " You mentioned buying {item}, but not {item2}."),
    Tally("project", _project_shared, _project_part,
          ("I spent {money} on {thing} for the {project} this week.",
           "Just paid {money} for {thing}, the {project} is coming along."),
          ("Good progress on the {project}! Keep receipts in one folder.",
           "Thanks for the update, that's a big step."),
          ("How much have I spent on the {project} so far?",
           "What's the total I've paid for the {project} up to now?"),
          "${total}",
          "How much have I spent on the {project2} so far?",
          NOT_ENOUGH + " You mentioned spending on the {project}, but not on a {project2}."),
    Tally("volunteer", lambda r: {"other": r.choice(("the hospital", "the museum"))},
          lambda r, s: {"n": str(r.randint(2, 8)), "place": r.choice(VOLUNTEER)},
          ("I volunteered {n} hours at {place} this week and loved it.",),
          ("That's wonderful, {place} is lucky to have you.",),
          ("How many hours have I volunteered in total?",
           "Adding it all up, how many hours of volunteering have I done?"),
          "{total}",
          "How many hours have I volunteered at {other}?",
          NOT_ENOUGH + " You mentioned volunteering, but not at {other}."),
    Tally("books", lambda r: {"genre": r.choice(("poetry", "travel"))},
          lambda r, s: {"n": "1", "title": _title(r)},
          ("I just finished reading '{title}'. What should I read next?",),
          ("Finishing '{title}' deserves a little break; maybe try something shorter next.",),
          ("How many books have I finished reading recently?",
           "How many books did I tell you I finished?"),
          "{count}",
          "How many {genre} books have I finished reading?",
          NOT_ENOUGH + " You mentioned finishing some books, but not any {genre} books."),
    Tally("running", lambda r: {"sport": r.choice(("swum", "cycled"))},
          lambda r, s: {"n": str(r.randint(4, 21)),
                        "place": r.choice(("the river path", "the park loop", "the beach"))},
          ("I ran {n} km along {place} this morning. My legs are tired!",),
          ("{n} km is a solid run; stretch and hydrate well.",),
          ("How many kilometers have I run in total?",
           "What's the total distance of the runs I told you about?"),
          "{total} km",
          "How many kilometers have I {sport} in total?",
          NOT_ENOUGH + " You mentioned your runs, but not how far you have {sport}."),
    Tally("countries", lambda r: {"region": r.choice(("South America", "Oceania"))},
          lambda r, s: {"n": "1", "country": r.choice(COUNTRIES)},
          ("Just got back from {country}! Any tips for getting over jet lag?",),
          ("Welcome back from {country}! Get morning light and avoid long naps.",),
          ("How many different countries have I visited recently?",
           "How many countries have I come back from lately?"),
          "{count}",
          "How many countries in {region} have I visited?",
          NOT_ENOUGH + " You mentioned trips, but none to {region}."),
)


# ---------------------------------------------------------------- temporal-reasoning
EVENTS: tuple[Event, ...] = (
    Event("car-service", lambda r: {"shop": f"{r.choice(NAME_WORDS)} Motors"},
          ("I finally got my car serviced at {shop} today. They found a worn brake pad.",),
          ("Good thing they caught that brake pad!",),
          "got my car serviced", "the car service"),
    Event("pottery", lambda r: {"day": r.choice(WEEKDAYS)},
          ("I started my pottery class this evening! It meets every {day}.",),
          ("How fun! Wedging the clay well makes centering much easier.",),
          "started the pottery class", "the first pottery class"),
    Event("kitten", lambda r: {"pet": r.choice(PET_NAMES)},
          ("We adopted a kitten today and named her {pet}! What should I buy first?",),
          ("Congratulations! Get a litter box, scratching post and kitten food first.",),
          "adopted the kitten", "the kitten adoption"),
    Event("thesis", lambda r: {"field": r.choice(FIELDS)},
          ("I submitted my {field} thesis draft to my advisor this morning. Such a relief!",),
          ("Well done! Take a break before the revisions come back.",),
          "submitted my thesis draft", "the thesis draft submission"),
    Event("10k", lambda r: {"city": r.choice(CITIES)},
          ("I ran my first 10k race today in {city}! How should I recover?",),
          ("Congratulations! Walk a bit, eat well and rest for two days.",),
          "ran my first 10k race", "the 10k race"),
    Event("dentist", lambda r: {"person": r.choice(PEOPLE)},
          ("Just got back from the dentist, Dr. {person} did a filling today.",),
          ("Avoid chewing on that side for a few hours.",),
          "had the dental filling", "the dentist appointment"),
    Event("tomatoes", lambda r: {"n": str(r.randint(4, 12))},
          ("I planted {n} tomato seedlings in the backyard this afternoon.",),
          ("Water them deeply and stake them early.",),
          "planted the tomatoes", "planting the tomatoes"),
    Event("lease", lambda r: {"city": r.choice(CITIES)},
          ("I signed the lease for a new apartment today!",),
          ("Congratulations! Photograph every room before you move in.",),
          "signed the new lease", "signing the lease"),
    Event("party", lambda r: {"n": str(r.randint(8, 30))},
          ("We hosted our housewarming party tonight, {n} people came!",),
          ("Sounds like a great night!",),
          "hosted the housewarming party", "the housewarming party"),
    Event("laptop", lambda r: {"brand": r.choice(("Lenovo", "Dell", "Framework", "ASUS"))},
          ("I bought a new {brand} laptop today. What should I install first?",),
          ("Update the system first, then a password manager and your backups.",),
          "bought the new laptop", "buying the laptop"),
    Event("course", lambda r: {"subject": r.choice(SUBJECTS)},
          ("I finished the online course on {subject} today and got the certificate!",),
          ("Congratulations! Add the certificate to your profile.",),
          "finished the online course", "finishing the online course"),
    Event("flights", lambda r: {"city": r.choice(CITIES)},
          ("I booked the flights to {city} this morning, it's really happening!",),
          ("Exciting! Check the baggage allowance now rather than at the airport.",),
          "booked the flights", "booking the flights"),
)


# ---------------------------------------------------------------- filler chat
@dataclass(frozen=True)
class Topic:
    name: str
    exchanges: tuple[Exchange, ...]
    tips: tuple[str, ...]  # appended to replies, for variety


def filler_slots(r: random.Random) -> dict[str, str]:
    """One session's values for the filler templates below."""
    cuisine = r.choice(sorted(CUISINES))
    return {
        "city": r.choice(CITIES), "country": r.choice(COUNTRIES), "cuisine": cuisine,
        "dish": r.choice(CUISINES[cuisine]), "veg": r.choice(VEGETABLES),
        "n": str(r.randint(2, 9)), "m": str(r.randrange(10, 65, 5)),
        "weekday": r.choice(WEEKDAYS), "month": r.choice(MONTHS),
        "subject": r.choice(SUBJECTS), "hobby": r.choice(HOBBIES),
        "lang": r.choice(("Python", "JavaScript", "SQL", "Rust", "Go")),
        "genre": r.choice(BOOK_GENRES), "title": _title(r),
    }


TOPICS: tuple[Topic, ...] = (
    Topic("cooking", (
        ("What's a good side dish for {dish}?", "A crisp salad with lemon or roasted {veg} "
         "balances {dish} well."),
        ("How do I keep {veg} from going soggy in the oven?", "Dry them well, use high heat "
         "and don't crowd the tray."),
        ("Can I make {dish} a day ahead?", "Yes, most stews improve overnight; reheat gently."),
        ("What spices are typical in {cuisine} cooking?", "It varies by region, but start "
         "with the basics and build a small collection."),
        ("How long does cooked rice keep in the fridge?", "About {n} days if cooled quickly "
         "and stored airtight."),
    ), ("Taste as you go.", "Season in layers rather than all at the end.",
        "A sharp knife makes everything easier.")),
    Topic("travel", (
        ("What's the weather like in {city} in {month}?", "Usually mild, but pack layers and "
         "a light rain jacket."),
        ("Do I need a visa to visit {country}?", "It depends on your passport; check the "
         "official consulate site before booking."),
        ("How many days do I need to see {city}?", "Around {n} days covers the highlights at "
         "a relaxed pace."),
        ("What's the best way to get around {city}?", "Public transport and walking work "
         "well; taxis are handy late at night."),
        ("Any tips for packing light?", "Roll your clothes, pick one colour palette and limit "
         "shoes to two pairs."),
    ), ("Keep digital copies of your documents.", "Travel insurance is worth it.",
        "Learn a few local phrases.")),
    Topic("fitness", (
        ("How often should I stretch?", "A few minutes daily beats one long session a week."),
        ("Is it okay to run on {weekday}s and lift weights the next day?", "Yes, as long as "
         "you sleep well and keep one easy day."),
        ("How many push-ups should a beginner do?", "Start with {n} sets of what you can do "
         "with good form."),
        ("What should I eat before a morning workout?", "Something light like a banana or "
         "toast about {m} minutes before."),
    ), ("Consistency matters more than intensity.", "Rest days are part of training.",
        "Warm up for at least five minutes.")),
    Topic("coding", (
        ("How do I read a CSV file in {lang}?", "Use the standard library or a data library; "
         "both handle headers and quoting."),
        ("What's the difference between a list and a tuple?", "Lists are mutable, tuples are "
         "not, which makes tuples usable as dictionary keys."),
        ("My {lang} script is slow on large files. Ideas?", "Profile first, then stream the "
         "file instead of loading it all at once."),
        ("How should I name my variables?", "Descriptive names that say what a value means, "
         "not its type."),
        ("What's a good way to learn {lang}?", "Build a small project you care about and read "
         "other people's code."),
    ), ("Write a test for the bug before fixing it.", "Commit small changes often.",
        "Read the error message slowly.")),
    Topic("writing", (
        ("Can you help me write an email asking for a deadline extension?", "Sure: be brief, "
         "give the reason, propose a new date and thank them."),
        ("How do I make my cover letter stand out?", "Lead with one concrete achievement that "
         "matches the job."),
        ("Is it rude to follow up after {n} days?", "Not at all; a short polite follow-up is "
         "normal."),
        ("How do I write a good thank-you note?", "Mention something specific they did and "
         "how it helped."),
    ), ("Read it aloud before sending.", "Shorter is usually better.",
        "Put the ask in the first paragraph.")),
    Topic("money", (
        ("How much should I keep in an emergency fund?", "Commonly three to six months of "
         "expenses."),
        ("Is the 50/30/20 budget rule realistic?", "It's a useful starting point; adjust it "
         "to your rent and goals."),
        ("How do I stop impulse buying?", "Wait {n} days before any non-essential purchase "
         "and unsubscribe from store emails."),
        ("Should I pay off debt or save first?", "Build a small buffer, then attack "
         "high-interest debt."),
    ), ("Automate what you can.", "Track spending for one month before changing anything.",
        "Small recurring costs add up.")),
    Topic("garden", (
        ("When should I plant garlic?", "In autumn, a few weeks before the ground freezes."),
        ("Why are my basil leaves turning yellow?", "Usually overwatering or poor drainage; "
         "let the soil dry between waterings."),
        ("How do I start composting in a small yard?", "A closed bin with a mix of greens and "
         "browns works well."),
        ("What grows well in partial shade?", "Lettuce, spinach, herbs like mint and parsley, "
         "and many ferns."),
    ), ("Mulch saves water.", "Water in the morning.", "Rotate crops each season.")),
    Topic("home", (
        ("How do I fix a dripping tap?", "Usually a worn washer or cartridge; turn off the "
         "water and replace it."),
        ("What's the best way to remove mould from a bathroom ceiling?", "Ventilate, clean "
         "with a diluted vinegar solution and fix the moisture source."),
        ("How do I patch a small hole in drywall?", "Use spackle for small holes, sand it "
         "smooth and paint."),
        ("How often should I replace my furnace filter?", "Every one to three months, more "
         "often with pets."),
    ), ("Turn off the power before electrical work.", "Take a photo before you take anything "
        "apart.", "Measure twice.")),
    Topic("screen", (
        ("Can you recommend a {genre} series to binge?", "Look for one with strong reviews "
         "and a finished run, so you're not left hanging."),
        ("Is '{title}' worth watching?", "Opinions are mixed; the first episodes are slow but "
         "it builds."),
        ("What's a good movie for a family night?", "An animated adventure usually works "
         "across ages."),
        ("How do I stop doomscrolling at night?", "Charge your phone outside the bedroom and "
         "keep a paper book nearby."),
    ), ("Subtitles help with fast dialogue.", "Short seasons are easier to finish.",
        "Take breaks between episodes.")),
    Topic("learning", (
        ("How can I learn {subject} on my own?", "Pick one introductory book, take notes and "
         "explain what you learn to someone."),
        ("What's the best way to memorize facts?", "Spaced repetition: review just before you "
         "would forget."),
        ("How many hours a week should I study for an exam in {month}?", "Around {n} focused "
         "hours a week, with practice tests near the end."),
        ("Any tips for staying focused?", "Work in {m}-minute blocks with short breaks and "
         "silence notifications."),
    ), ("Sleep consolidates learning.", "Teach it to learn it.", "Test yourself often.")),
    Topic("health", (
        ("How much water should I drink a day?", "It varies; let thirst and pale urine be "
         "your guide."),
        ("Why do I wake up at 3 am?", "Stress, caffeine late in the day or a warm room are "
         "common causes."),
        ("Is a {m}-minute nap too long?", "Naps over about 30 minutes can leave you groggy."),
        ("How can I reduce screen eye strain?", "Every 20 minutes, look at something 20 feet "
         "away for 20 seconds."),
    ), ("See a doctor if it persists.", "Keep a regular sleep schedule.",
        "Small changes add up.")),
    Topic("hobbies", (
        ("I'm curious about {hobby}. How do I get started cheaply?", "Borrow or buy used gear "
         "and join a local group."),
        ("How do I make time for a hobby with a busy job?", "Schedule it like an appointment, "
         "even {m} minutes counts."),
        ("Is {hobby} expensive to get into?", "It can be, but the basics are affordable."),
        ("Any good online communities for {hobby}?", "Forums and local clubs are friendlier "
         "for beginners than big social sites."),
    ), ("Beginners improve fastest with feedback.", "Enjoy the process.",
        "Keep a small journal of progress.")),
    Topic("work", (
        ("How do I say no to extra work politely?", "Acknowledge the request, explain your "
         "current priorities and offer an alternative."),
        ("How should I prepare for a performance review?", "List your wins with numbers and "
         "one goal for next quarter."),
        ("What's a good agenda for a {m}-minute meeting?", "Goal, two or three topics with "
         "owners, and decisions at the end."),
        ("How do I run better one-on-ones?", "Let the other person set most of the agenda and "
         "follow up on what you promised."),
    ), ("Write decisions down.", "Protect focus time on your calendar.",
        "Ask for feedback early.")),
    Topic("science", (
        ("Why is the sky blue?", "Air scatters short blue wavelengths of sunlight more than "
         "red ones."),
        ("How do vaccines work?", "They train the immune system to recognise a pathogen "
         "without causing the disease."),
        ("What causes the seasons?", "The tilt of Earth's axis, not its distance from the "
         "sun."),
        ("How do noise-cancelling headphones work?", "They record outside sound and play its "
         "inverse to cancel it."),
    ), ("Great question!", "There's a lot more to it if you're curious.",
        "Simple models go a long way.")),
    Topic("tech", (
        ("My wifi keeps dropping every {m} minutes. What can I try?", "Restart the router, "
         "move it off the floor and switch to a less crowded channel."),
        ("How do I free up space on my phone?", "Clear old videos and app caches, and offload "
         "apps you haven't opened in {n} months."),
        ("Is it worth buying an extended warranty for a printer?", "Rarely; printers are cheap "
         "to replace and warranties exclude most failures."),
        ("How do I back up my photos safely?", "Keep three copies on two kinds of storage, "
         "one of them off-site."),
    ), ("Update the firmware first.", "Write down what you changed.",
        "Turning it off and on again really does fix a lot.")),
    Topic("history", (
        ("Why did the Roman Empire split in two?", "Mostly to make a huge territory "
         "governable, with separate administrations in east and west."),
        ("Who built the first printing press in Europe?", "Johannes Gutenberg, around 1440."),
        ("What was the Silk Road?", "A network of trade routes linking China with the "
         "Mediterranean for centuries."),
        ("When did people start using surnames?", "It varied a lot; in England they became "
         "common after the Norman conquest."),
    ), ("Historians still debate the details.", "Primary sources tell a richer story.",
        "Fun topic!")),
    Topic("events", (
        ("How far ahead should I send invitations for a dinner party?", "About {n} weeks for "
         "a casual dinner, longer around holidays."),
        ("What's an easy menu for {m} guests?", "A big pot dish, a salad and a simple "
         "dessert scale well."),
        ("How do I plan a kid's birthday party on a budget?", "Host it at home or in a park, "
         "keep the guest list small and do one simple activity."),
        ("Any icebreakers for a team offsite?", "Two truths and a lie, or everyone shares a "
         "small win from the month."),
    ), ("Make a timeline.", "Delegate what you can.", "Keep a backup plan for bad weather.")),
)

# Surface variety for filler user turns: chatty openers and closers around the question.
OPENERS = ("", "", "", "Quick question. ", "Hey there! ", "Hi again. ", "Okay, next thing. ",
           "Random one: ", "Good morning! ", "So, ")
CLOSERS = ("", "", "", " Thanks in advance.", " Keep it short please.", " Any thoughts?",
           " I've been wondering about this for a while.", " Asking for a friend.",
           " No rush.")

FOLLOW_UPS: tuple[Exchange, ...] = (
    ("Thanks! Can you summarize that in one sentence?", "In short: start small, stay "
     "consistent and adjust as you go."),
    ("That's helpful, anything else I should know?", "Just that it's worth revisiting in a "
     "few weeks to see what's working."),
    ("Could you put that as a short checklist?", "Sure: decide, prepare, do it, review."),
    ("Perfect, thank you!", "You're welcome, happy to help anytime."),
)
