"""Word lists and sentence templates of the synthetic dataset (:mod:`memroute.eval.synthetic`).

Pure data plus the few value formatters the templates use; the generator logic lives in
``synthetic.py``. Any change here changes the generated conversations for every seed. Pool values
are never reused across users, so the pools must stay large enough for ``synthetic.MAX_USERS``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: synthetic.py imports this module at run time
    from memroute.eval.synthetic import _Draw

_MONTHS = (
    "January February March April May June July August September October November December"
).split()

FIRST_NAMES = (
    "Maya Tobias Priya Elena Marcus Ingrid Kofi Lucia Dmitri Hana Rafael Yara "
    "Soren Amara Felix Noor Mateo Freya Idris Leila Oskar Zara Caleb Anika"
).split()

POOLS: dict[str, tuple[str, ...]] = {
    "pet": tuple(
        "Biscuit Pepper Mochi Juniper Waffles Ziggy Clementine Nacho Pickles Tofu Marble "
        "Sprocket Noodle Basil Olive Pretzel Cosmo Hazel Dumpling Rocket Maple Toffee Bramble "
        "Quincy Sesame Fennel Gizmo Paprika Chutney Wombat".split()
    ),
    "person": tuple(
        "Beatrix Cormac Delphine Emeka Fiona Gideon Halima Ignatius Jolene Kasimir Lorena "
        "Magnus Nadia Orla Piotr Rosalind Saoirse Thaddeus Ulrike Viggo Wilhelmina Xavier "
        "Yusuf Zofia Anselm Bettina Cyrus Dagny Evander Florentyna Gunnar Honora Ivo Jessamy "
        "Lysander Mireille Niamh Octavia Percival Rhiannon".split()
    ),
    "surname": tuple(
        "Okafor Lindqvist Moreau Castellano Nakamura Brennan Haddad Kowalski Abernathy "
        "Fairweather Quintero Vasquez Thornbury Ashdown Delacroix Ferreira Gallagher Holmberg "
        "Iverson Jablonski Kettleby Marchetti Osei Pemberton".split()
    ),
    "city": (
        "Lisbon", "Porto", "Valencia", "Krakow", "Ljubljana", "Tallinn", "Bergen", "Ghent",
        "Bologna", "Seville", "Tbilisi", "Montreal", "Halifax", "Oaxaca", "Cusco", "Hobart",
        "Wellington", "Kyoto", "Busan", "Hanoi", "Chiang Mai", "Marrakesh", "Zanzibar",
        "Reykjavik", "Edinburgh", "Galway", "Salzburg", "Innsbruck", "Lyon", "Bordeaux",
        "Asheville", "Boise", "Tucson", "Savannah", "Duluth", "Madison", "Spokane",
        "Burlington", "Santa Fe", "Providence",
    ),
    "vendor": tuple(
        "Northwind Bluebell Copperleaf Harborlight Silverpine Ironbark Sunfield Maplecrest "
        "Stonebridge Larkspur Windrose Brightwater Oakhaven Fernhill Kestrel Tidewater Highgate "
        "Cobalt Meridian Pinecone Foxglove Whitestone Blackthorn Goldcrest Riverbend Aspenwood "
        "Lakeshore Summitline Quillon Brambleton Everly Hollowell Marlow Thistledown Wrenfield "
        "Ashcombe Bellwether Cedarline Dunmore Elmstead".split()
    ),
    "team": (
        "Payments", "Search", "Mobile", "Growth", "Billing", "Infrastructure", "Analytics",
        "Security", "Checkout", "Onboarding", "Identity", "Notifications", "Localization",
        "Reliability", "Partnerships", "Logistics", "Pricing", "Recommendations", "Messaging",
        "Compliance", "Developer Tools", "Data Platform", "Marketplace", "Fraud Detection",
    ),
}
BREEDS = ("beagle", "corgi", "greyhound", "poodle", "dachshund", "whippet", "spaniel", "terrier")
FOODS = ("lentils", "chickpeas", "tofu", "mushrooms", "spinach", "sweet potatoes", "eggs", "rice")
HOBBIES = ("pottery", "bouldering", "birdwatching", "sourdough baking", "chess", "watercolor")
SHOWS = ("a nature documentary", "an old detective series", "a cooking competition")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# Date and time formats, shared by the fact templates and the LoCoMo session headers.
def fmt_date(d: datetime) -> str:
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def fmt_time(h: int, m: int) -> str:
    return f"{(h - 1) % 12 + 1}:{m:02d} {'am' if h < 12 else 'pm'}"


def fmt_session(d: datetime) -> str:
    """LoCoMo's style: ``"2:15 pm on 3 March, 2024"``."""
    return f"{fmt_time(d.hour, d.minute)} on {d.day} {_MONTHS[d.month - 1]}, {d.year}"


# Value makers for the variants' ``values`` callables (numbers and codes in a fixed format).
def _code(rng: random.Random) -> str:
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(1000, 9999)}"


def _apartment(rng: random.Random) -> str:
    return f"{rng.randint(2, 19)}{rng.randint(1, 24):02d}"  # floor + unit


def _budget(rng: random.Random) -> str:
    return f"${rng.randint(12, 48)},{rng.choice(('000', '500'))}"


def _clock(rng: random.Random) -> str:
    return fmt_time(rng.randint(8, 16), rng.choice((0, 15, 30, 45)))


def _vendor_pair(d: _Draw, suffix: str) -> dict[str, str]:
    chosen, other = d.pick("vendor"), d.pick_distractor("vendor")
    return {"value": f"{chosen}{suffix}", "other": f"{other}{suffix}"}


@dataclass(frozen=True)
class Variant:
    fact_type: str
    key: str
    values: Callable[[_Draw, int], dict[str, str]]  # (draw, epoch of the planted session)
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str = "{value}"
    # corrections only: the first statement of the (later superseded) value, in {old}
    user_old: tuple[str, ...] = field(default=())
    assistant_old: tuple[str, ...] = field(default=())


# Every way a fact is planted: its statement, the assistant's restatement and probe questions.
VARIANTS: tuple[Variant, ...] = (
    # ---- name
    Variant(
        "name", "dog",
        lambda d, t: {"value": d.pick("pet"), "breed": d.rng.choice(BREEDS)},
        ("We finally adopted a {breed} puppy this weekend! We named her {value}.",
         "Big news at home: we brought home a little {breed} and called him {value}."),
        ("Congratulations! {value} is a great name for a {breed}. Enjoy the puppy days!",
         "How exciting, a {breed} named {value}! I hope the first nights go smoothly."),
        ("What's my dog called again?", "What name did we give our puppy?",
         "Remind me, what is our new dog's name?"),
    ),
    Variant(
        "name", "cat",
        lambda d, t: {"value": d.pick("pet")},
        ("The rescue kitten we took in now answers to {value}, believe it or not.",
         "Our cat's name is {value}, she runs the whole house."),
        ("{value} sounds like a cat with personality! Thanks for telling me.",
         "Ha, every house needs a boss. {value} it is."),
        ("What is my cat's name?", "Do you remember what we call our cat?",
         "What did we end up naming the kitten?"),
    ),
    Variant(
        "name", "manager",
        lambda d, t: {"value": f"{d.pick('person')} {d.pick('surname')}"},
        ("I got reassigned today, my new manager is {value}.",
         "Starting Monday I report to {value}, who just joined from another office."),
        ("Good to know, {value} is your new manager. I hope it's a good fit!",
         "Noted: you now report to {value}. New managers can bring fresh energy."),
        ("Who is my new boss?", "Who do I report to now?", "What's my new manager's name?"),
    ),
    Variant(
        "name", "niece",
        lambda d, t: {"value": d.pick("person")},
        ("My sister had her baby last night! A girl, and they named her {value}.",
         "I'm an aunt now, my sister's daughter was born and her name is {value}."),
        ("Congratulations to your sister! {value} is a beautiful name for your niece.",
         "What wonderful news, welcome to the world, little {value}!"),
        ("What's my niece's name?", "What did my sister call her baby girl?",
         "Remind me of the name of my sister's newborn?"),
    ),
    # ---- number
    Variant(
        "number", "apartment",
        lambda d, t: {"value": d.fresh("number", _apartment)},
        ("I signed the lease! I'm moving into apartment {value} next month.",
         "The new place is unit {value}, on the top floor of the building."),
        ("Congrats on the lease! Apartment {value}, I'll remember that.",
         "Unit {value} on the top floor, nice! Moving day will be here soon."),
        ("What's the number of the apartment I'm moving into?", "Which unit is my new place?",
         "Remind me, what apartment number did I sign for?"),
    ),
    Variant(
        "number", "budget",
        lambda d, t: {"value": d.fresh("budget", _budget)},
        ("We settled on a budget of {value} for the kitchen renovation.",
         "The kitchen remodel has to fit in {value}, that's our hard limit."),
        ("Got it, {value} for the kitchen renovation. That's a workable budget.",
         "A {value} ceiling for the kitchen, noted. Good to have a firm number."),
        ("How much can we spend on redoing the kitchen?", "What's our kitchen remodel budget?",
         "What spending limit did we set for the kitchen?"),
    ),
    Variant(
        "number", "locker",
        lambda d, t: {"value": d.fresh("number", lambda r: str(r.randint(100, 899)))},
        ("They gave me locker {value} at the climbing gym, finally a permanent one.",
         "My permanent locker at the climbing gym is number {value}."),
        ("Locker {value}, nice! No more hunting for a free one.",
         "Great, locker number {value} at the gym is yours now."),
        ("Which locker is mine at the climbing gym?", "What's my gym locker number?",
         "What number is the locker they assigned me?"),
    ),
    Variant(
        "number", "guests",
        lambda d, t: {"value": d.fresh("number", lambda r: str(r.randint(23, 95)))},
        ("Final headcount for the family reunion is {value} guests.",
         "We confirmed {value} people for the family reunion picnic."),
        ("{value} guests for the reunion, that's quite a gathering!",
         "Okay, {value} people confirmed for the reunion. Plenty of food needed!"),
        ("How many people are coming to the family reunion?",
         "What's the headcount for our reunion?",
         "How many guests did we confirm for the reunion?"),
    ),
    # ---- date
    Variant(
        "date", "flight",
        lambda d, t: {"value": d.later_date(t, 10, 70), "city": d.pick("city")},
        ("I booked my flight to {city}, I leave on {value}.",
         "Tickets are booked: I fly out to {city} on {value}."),
        ("Exciting! A trip to {city} on {value}. I'll keep that date in mind.",
         "Flying to {city} on {value}, noted. Have you planned what to see?"),
        ("When do I fly out to {city}?", "What day does my {city} trip start?",
         "When is my flight to {city}?"),
    ),
    Variant(
        "date", "dentist",
        lambda d, t: {"value": d.later_date(t, 7, 40)},
        ("The dentist could only fit me in on {value}, so that's my appointment.",
         "My next dental checkup is booked for {value}."),
        ("Dentist on {value}, got it. Better than waiting months!",
         "Noted, your dental checkup is on {value}."),
        ("When is my dentist appointment?", "What date did the dentist give me?",
         "When am I seeing the dentist next?"),
    ),
    Variant(
        "date", "wedding",
        lambda d, t: {"value": d.later_date(t, 30, 120), "cousin": d.pick("person")},
        ("My cousin {cousin} is getting married on {value} and I'm in the wedding party!",
         "Save the date came in: {cousin}'s wedding is on {value}."),
        ("How lovely! {cousin}'s wedding on {value}, I'll remember it.",
         "A wedding on {value}, congratulations to {cousin}!"),
        ("When is my cousin's wedding?", "What's the date of {cousin}'s wedding?",
         "When do I need to be at {cousin}'s wedding?"),
    ),
    Variant(
        "date", "lease",
        lambda d, t: {"value": d.later_date(t, 40, 150)},
        ("My current lease ends on {value}, so I need to decide about renewing.",
         "Landlord reminded me my lease runs out on {value}."),
        ("Your lease ends on {value}, that gives you some time to decide.",
         "Okay, lease end on {value}. Worth starting to look a bit before then."),
        ("When does my lease run out?", "What's the end date of my rental agreement?",
         "When is my lease up?"),
    ),
    # ---- decision
    Variant(
        "decision", "caterer",
        lambda d, t: _vendor_pair(d, " Catering"),
        ("For the launch party we went with {value} instead of {other}.",
         "Decision made: {value} will do the launch party food, not {other}."),
        ("{value} for the launch party, good choice! I hope the menu is great.",
         "Great, {value} it is for the launch party food."),
        ("Which caterer did we pick for the launch party?",
         "Who is doing the food for our launch event?",
         "What catering company did we choose in the end?"),
    ),
    Variant(
        "decision", "movers",
        lambda d, t: _vendor_pair(d, " Movers"),
        ("I compared quotes and hired {value} over {other} for the move.",
         "We're going with {value} for moving day; {other} was too pricey."),
        ("{value} for the move, sounds like you did your homework.",
         "Good call comparing quotes. {value} it is for moving day."),
        ("Which moving company did I hire?", "Who is handling my move?",
         "What movers did I go with after comparing quotes?"),
    ),
    Variant(
        "decision", "crm",
        lambda d, t: _vendor_pair(d, " CRM"),
        ("After the trials, my team picked {value} rather than {other}.",
         "We're standardizing on {value}; {other} lost out in the end."),
        ("{value} won the trial, nice. Migrating the contacts is next, I guess.",
         "Okay, your team chose {value}. I'll keep that in mind."),
        ("Which CRM did my team choose?", "What customer database tool did we go with?",
         "Which tool won our CRM trial?"),
    ),
    # ---- code
    Variant(
        "code", "order",
        lambda d, t: {"value": d.fresh("code", _code)},
        ("I ordered the standing desk, the order number is {value}.",
         "Standing desk is ordered, confirmation {value} in case it goes missing."),
        ("Order {value} for the standing desk, saved in case you need to chase it.",
         "Noted, your desk order is {value}."),
        ("What was the order number for my standing desk?",
         "Which confirmation number did I get for the desk?",
         "What's the reference for my desk order?"),
    ),
    Variant(
        "code", "error",
        lambda d, t: {"value": d.fresh("code", _code)},
        ("The deploy keeps failing with error code {value}, it's driving me nuts.",
         "Our pipeline crashed again, same {value} error as yesterday."),
        ("Error {value} again? That sounds like a config problem worth a ticket.",
         "Ugh, {value} again. Maybe check the recent config changes."),
        ("Which error code was my deploy failing with?", "What error kept breaking our pipeline?",
         "What was the code of the build error I kept hitting?"),
    ),
    Variant(
        "code", "booking",
        lambda d, t: {"value": d.fresh("code", _code)},
        ("The hotel booking reference for the conference is {value}.",
         "I reserved the conference hotel, reference {value}."),
        ("Hotel reference {value}, noted for the conference trip.",
         "Got it, booking {value} for the conference hotel."),
        ("What's my hotel booking reference for the conference?",
         "Which reservation code did the conference hotel give me?",
         "Do you have the hotel confirmation code for the conference?"),
    ),
    # ---- negative
    Variant(
        "negative", "coffee",
        lambda d, t: {},
        ("I never drink coffee, it makes me way too jittery.",
         "Just so you know, I don't drink coffee at all."),
        ("Noted, no coffee for you. Herbal tea might be a nicer pick.",
         "Got it, you never drink coffee. I'll keep that in mind for suggestions."),
        ("Do I drink coffee?", "Am I a coffee drinker?", "Would I want a coffee?"),
        answer="No",
    ),
    Variant(
        "negative", "meat",
        lambda d, t: {},
        ("I don't eat meat, I've been vegetarian for years.",
         "Keep in mind I never eat meat."),
        ("Understood, you don't eat meat. I'll stick to vegetarian ideas.",
         "Noted, no meat for you, only vegetarian recipes."),
        ("Do I eat meat?", "Would a steak dinner suit me?", "Am I a meat eater?"),
        answer="No",
    ),
    Variant(
        "negative", "car",
        lambda d, t: {},
        ("I don't own a car, I bike or take the bus everywhere.",
         "I have never owned a car, public transport works fine for me."),
        ("Got it, no car, so bus and bike it is.",
         "Noted, you don't have a car. I'll suggest transit routes."),
        ("Do I have a car?", "Do I own a car?", "Could I just drive there myself in my car?"),
        answer="No",
    ),
    Variant(
        "negative", "smoke",
        lambda d, t: {},
        ("I have never smoked, not even once.",
         "I don't smoke and never have."),
        ("Good to know, you've never smoked.",
         "Noted, you don't smoke."),
        ("Do I smoke?", "Have I ever been a smoker?", "Am I a smoker?"),
        answer="No",
    ),
    # ---- correction (answer = new value; stale_answer = old value)
    Variant(
        "correction", "city",
        lambda d, t: {"old": d.pick("city"), "value": d.pick("city")},
        ("Update: I moved! I live in {value} now, not {old}.",
         "I've relocated to {value}, the {old} days are over."),
        ("Congrats on the move to {value}! I'll remember you're there now.",
         "Welcome to {value}! Noted that you left {old}."),
        ("Which city do I live in now?", "Where am I based these days?",
         "What city is home for me at the moment?"),
        user_old=("I live in {old}, close to the river.", "Life in {old} is pretty relaxed."),
        assistant_old=("{old} sounds lovely, especially by the river.",
                       "Relaxed life in {old}, nice!"),
    ),
    Variant(
        "correction", "standup",
        lambda d, t: {"old": d.fresh("clock", _clock), "value": d.fresh("clock", _clock)},
        ("Heads up, our daily standup moved to {value}.",
         "From this week the standup is at {value} instead of {old}."),
        ("Standup at {value} now, noted.",
         "Okay, {value} for standup from now on."),
        ("What time is our daily standup now?", "When do we have standup these days?",
         "At what time does my team meet for standup now?"),
        user_old=("Our daily standup is at {old} every morning.",
                  "We do the team standup at {old}."),
        assistant_old=("Standup at {old}, got it.", "A {old} standup, noted."),
    ),
    Variant(
        "correction", "team",
        lambda d, t: {"old": d.pick("team"), "value": d.pick("team")},
        ("I transferred, I'm on the {value} team now.",
         "Reorg news: I moved from {old} to the {value} team."),
        ("The {value} team, congrats on the transfer!",
         "Noted, you're on {value} now. A fresh start!"),
        ("Which team am I on at work now?", "What team did I end up in after the reorg?",
         "What's my current team at work?"),
        user_old=("I work on the {old} team at my company.", "My team at work is {old}."),
        assistant_old=("The {old} team, sounds interesting!", "Okay, {old} team, noted."),
    ),
)

# Small talk around the facts. Several touch the same topics as the facts (pets, trips, budgets,
# errors, dates) so the planted turn is not the only one a probe's keywords match.
FILLER: tuple[tuple[str, str], ...] = (
    ("My friend {friend} is thinking about adopting a dog too.",
     "That's lovely, {friend} will have a loyal companion."),
    ("Any tips for keeping a pet calm during thunderstorms?",
     "A quiet room, some background noise and a favorite blanket usually help."),
    ("My neighbor's cat keeps visiting our balcony.",
     "A regular visitor! Cats love a good balcony."),
    ("The building across the street has apartments with rooftop gardens.",
     "Rooftop gardens are such a nice touch in a city."),
    ("What's a reasonable budget for a weekend in {city}?",
     "For two nights, a few hundred covers a modest hotel and meals."),
    ("My coworker's flight to {city} got delayed by three hours yesterday.",
     "Delays are the worst. I hope they made it in the end."),
    ("I need to book a checkup with my doctor sometime soon.",
     "It's good not to put that off. Mornings are often easier to get."),
    ("Our office is comparing two vendors for the new printers.",
     "Printer contracts are surprisingly tricky, service terms matter most."),
    ("My phone showed a weird error during the last update.",
     "Restarting and updating again usually clears those."),
    ("I watched {show} last night.", "Nice way to unwind! Did you enjoy it?"),
    ("{friend} got a new job at a startup in {city}.", "Good for {friend}! That's a big change."),
    ("Can you suggest a quick dinner with {food}?",
     "Sure, a {food} stir-fry with garlic and rice takes about twenty minutes."),
    ("I've been trying to get into {hobby} lately.",
     "That's a great pick, {hobby} is relaxing and there's always more to learn."),
    ("Any tips for sleeping better?",
     "Keep a regular bedtime, dim the lights an hour before and skip screens in bed."),
    ("It rained all {weekday}, so I stayed in and read.", "Rainy reading days are underrated."),
    ("Our team meeting ran long again today.",
     "Long meetings drain energy. A tighter agenda might help."),
    ("I'm trying to drink more water during the day.",
     "A bottle on the desk is the easiest reminder."),
    ("I ordered new running shoes online.", "Exciting! I hope they fit well."),
    ("The hotel we stayed at in {city} last year was lovely.",
     "Good hotels make a trip. {city} sounds like it treated you well."),
    ("My sister and I talked on the phone for two hours.",
     "Sounds like you had a lot to catch up on."),
    ("Do you know any good board games for four people?",
     "Ticket to Ride and Codenames are easy crowd-pleasers."),
    ("I finally cleaned out the garage.", "That must feel great, it's such a big job."),
    ("Work has been pretty hectic this week.", "Hang in there, the weekend is close."),
    ("I'm thinking of learning a new language, maybe Portuguese.",
     "Portuguese is a great choice, a few minutes a day goes a long way."),
    ("{friend} recommended a podcast about history.",
     "History podcasts are great for commutes."),
    ("My plants are finally growing again after the cold snap.",
     "Glad they bounced back! A sunny window helps."),
    ("I went for a long walk by the lake this morning.",
     "A morning walk is a nice way to start the day."),
    ("The renovation shows on TV make everything look so easy.",
     "They really do. Real projects usually take twice as long."),
    ("I have to renew my passport before the summer.",
     "Good idea to start early, processing can take weeks."),
    ("We had {n} people at the book club this time.", "{n} people, it's really growing!"),
    ("I keep forgetting where I put my keys.", "A small bowl by the door can fix that habit."),
    ("My laptop battery barely lasts two hours now.",
     "It might be time for a battery replacement."),
    ("Our neighborhood is having a street fair on {weekday}.", "Street fairs are so much fun."),
    ("I tried a new recipe with {food} and it turned out great.",
     "Nice! It's fun to find new ways to cook {food}."),
    ("I signed up for a {hobby} workshop.", "That should be a fun way to meet people too."),
    ("The elevator in our building was broken again today.",
     "That's frustrating, I hope they fix it properly this time."),
)
GREETINGS = (
    ("Hi again!", "Hi {name}! Good to hear from you. What's on your mind today?"),
    ("Hey, got a minute?", "Always, {name}. What's up?"),
    ("Good morning!", "Good morning, {name}! How are things?"),
    ("Hello, it's me again.", "Welcome back, {name}! How have you been?"),
)
CLOSINGS = (
    ("Thanks, that's all for now.", "Anytime, {name}. Talk soon!"),
    ("Okay, I need to run. Bye!", "Bye {name}, have a good one!"),
)
