"""The open-vocabulary fact keys' match threshold (``extraction.key_match_threshold``): cosine
between two keys' texts with the real MiniLM encoder, on a hand-labelled set of key pairs.

    python bench/bench_key_match.py [--json out.json]

Each pair is two keys an extractor could propose, each with the value-free description of the
fact, labelled ``same`` (one fact type under two spellings: they must merge) or ``different``
(two fact types: merging them makes one supersede the other, the fault the fixed schema had
with the rabbit "Wombat" and the parrot "Dumpling" both filed as ``user.name``). The
different pairs are the hard ones: they share most words and differ in the entity (rabbit /
parrot, sister / brother, pickup / drop-off).

Three texts are compared for each key (``memroute.memory.facts.keys.key_text``): the key's
words alone (``pet rabbit name``), the description alone, and both (what the canonicaliser
embeds). For each: the cosine range of each label, and per threshold the merges (true) and
the false merges. A false merge is worse than a missed one (a missed merge leaves two keys for
one fact; a false one supersedes a true value), so the threshold chosen is the lowest with no
false merge on this set, with the margin to the highest different pair printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from machine import machine_info

from memroute import build
from memroute.config.schema import AssetsConfig, EmbedderConfig
from memroute.memory.facts.keys import key_text, key_words

# (key, description, key, description)
SAME = [
    ("rabbit_name", "the name of the user's rabbit",
     "pet.rabbit.name", "the name of the user's pet rabbit"),
    ("parrot.name", "what the user's parrot is called",
     "pet.parrot.name", "the name of the user's pet parrot"),
    ("dog_name", "the name of the user's dog", "pet.dog.name", "what the user's dog is called"),
    ("user.city", "the city the user lives in", "user.location", "where the user lives now"),
    ("gate_code", "the code of the gate of the user's building",
     "building.gate.code", "the entry code for the user's building gate"),
    ("caterer", "the caterer the user chose for the event",
     "event.caterer.name", "the catering company the user hired for the event"),
    ("pickup_time", "when the user picks up their child from school",
     "child.school.pickup_time", "the time the user collects their kid from school"),
    ("user.employer", "the company the user works for",
     "work.company", "the company where the user is employed"),
    ("user.job", "the user's job title", "work.job_title", "the user's occupation"),
    ("user.partner", "the name of the user's partner",
     "family.spouse.name", "the name of the user's spouse"),
    ("wifi_password", "the password of the user's home wifi",
     "home.wifi.password", "the user's wifi network password"),
    ("doctor.name", "the name of the user's doctor", "user.physician", "the user's physician"),
    ("user.birthday", "the user's date of birth", "user.date_of_birth", "when the user was born"),
    ("user.language", "the language the user prefers",
     "preferred_language", "the language the user wants answers in"),
    ("flight.number", "the number of the user's flight",
     "trip.flight_number", "the flight number of the user's trip"),
    ("hotel.name", "the hotel the user booked", "trip.hotel", "where the user stays on the trip"),
    ("user.phone", "the user's phone number", "contact.phone_number", "the number to call the user"),
    ("kid.name", "the name of the user's kid", "child.name", "the name of the user's child"),
    ("sister.name", "the name of the user's sister",
     "family.sister.name", "what the user's sister is called"),
    ("car.model", "the model of car the user drives", "user.car", "the car the user owns"),
    ("gym.name", "the gym the user goes to", "fitness.gym", "the name of the user's gym"),
    ("standup_time", "the time of the user's daily standup",
     "work.standup.time", "when the user's daily stand-up meeting starts"),
]
DIFFERENT = [
    ("pet.rabbit.name", "the name of the user's pet rabbit",
     "pet.parrot.name", "the name of the user's pet parrot"),
    ("pet.rabbit.name", "the name of the user's pet rabbit", "user.name", "the name the user goes by"),
    ("pet.parrot.name", "the name of the user's pet parrot", "user.name", "the name the user goes by"),
    ("rabbit_name", "the name of the user's rabbit", "parrot_name", "the name of the user's parrot"),
    ("pet.dog.name", "the name of the user's dog", "pet.cat.name", "the name of the user's cat"),
    ("user.partner", "the name of the user's partner", "user.name", "the name the user goes by"),
    ("sister.name", "the name of the user's sister", "brother.name", "the name of the user's brother"),
    ("mother.name", "the name of the user's mother", "father.name", "the name of the user's father"),
    ("child.name", "the name of the user's child", "child.school", "the school the user's child attends"),
    ("building.gate.code", "the entry code for the user's building gate",
     "gym.locker.code", "the code of the user's gym locker"),
    ("event.caterer", "the caterer the user chose for the event",
     "event.venue", "the venue the user booked for the event"),
    ("child.pickup_time", "when the user picks up their child from school",
     "child.dropoff_time", "when the user drops their child off at school"),
    ("child.pickup_time", "when the user picks up their child from school",
     "work.standup.time", "when the user's daily standup starts"),
    ("user.employer", "the company the user works for", "user.job", "the user's job title"),
    ("user.location", "the city the user lives in now", "user.birthplace", "the city the user was born in"),
    ("user.budget", "the budget the user states for their trip", "user.salary", "the user's salary"),
    ("flight.number", "the number of the user's flight",
     "flight.departure_time", "when the user's flight leaves"),
    ("hotel.name", "the hotel the user booked", "hotel.checkin_date", "the day the user checks in"),
    ("home.wifi.password", "the password of the user's home wifi",
     "email.password", "the password of the user's email account"),
    ("dog.breed", "the breed of the user's dog", "dog.name", "the name of the user's dog"),
    ("manager.name", "the name of the user's manager", "coworker.name", "the name of the user's coworker"),
    ("doctor.name", "the name of the user's doctor", "dentist.name", "the name of the user's dentist"),
    ("user.phone", "the user's phone number", "user.email", "the user's email address"),
    ("home.address", "the address of the user's home", "work.address", "the address of the user's office"),
    ("car.model", "the model of car the user drives", "car.license_plate", "the user's licence plate"),
    ("user.birthday", "the user's date of birth", "partner.birthday", "the birthday of the user's partner"),
    ("user.language", "the language the user prefers", "user.nationality", "the user's nationality"),
    ("user.diet", "what the user eats or avoids", "user.allergy.medication", "medication the user is allergic to"),
]
VARIANTS = {
    "key words": lambda k, d: key_words(k),
    "description": lambda k, d: d,
    "key + description": key_text,
}


def cosines(encoder, pairs, text) -> np.ndarray:
    a = encoder.encode([text(k, d) for k, d, _, _ in pairs])
    b = encoder.encode([text(k, d) for _, _, k, d in pairs])
    return np.sum(a * b, axis=1)


def sweep(same: np.ndarray, diff: np.ndarray) -> dict:
    """The lowest threshold (0.01 steps) without a false merge, and what it merges."""
    top_diff = float(diff.max())
    threshold = float(np.ceil((top_diff + 1e-9) * 100) / 100)
    best_acc = max(((float(np.mean(np.r_[same >= t, diff < t])), round(float(t), 2))
                    for t in np.arange(0.5, 1.0, 0.01)))
    return {
        "same_min": float(same.min()), "same_median": float(np.median(same)),
        "diff_max": top_diff, "diff_median": float(np.median(diff)),
        "no_false_merge_threshold": threshold,
        "merged_at_it": int((same >= threshold).sum()),
        "best_accuracy": best_acc[0], "best_accuracy_threshold": best_acc[1],
        "per_threshold": {f"{t:.2f}": {"merged": int((same >= t).sum()),
                                       "false_merges": int((diff >= t).sum())}
                          for t in np.arange(0.70, 0.96, 0.05)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    assets = build.asset_store(AssetsConfig())
    encoder = build.encoder(EmbedderConfig(), assets)
    out = {"machine": machine_info(), "encoder": EmbedderConfig().name,
           "pairs": {"same": len(SAME), "different": len(DIFFERENT)}, "variants": {}}
    print(f"{len(SAME)} same pairs, {len(DIFFERENT)} different pairs, {out['encoder']}")
    for name, text in VARIANTS.items():
        same, diff = cosines(encoder, SAME, text), cosines(encoder, DIFFERENT, text)
        s = sweep(same, diff)
        out["variants"][name] = s
        print(f"\n{name}: same {s['same_min']:.3f}..(median {s['same_median']:.3f}); different "
              f"..{s['diff_max']:.3f} (median {s['diff_median']:.3f}); no false merge from "
              f"{s['no_false_merge_threshold']:.2f}: {s['merged_at_it']}/{len(SAME)} merged; "
              f"best accuracy {s['best_accuracy']:.3f} at {s['best_accuracy_threshold']:.2f}")
        for t, r in s["per_threshold"].items():
            print(f"  {t}: merged {r['merged']}/{len(SAME)}, false merges "
                  f"{r['false_merges']}/{len(DIFFERENT)}")
        order = np.argsort(-diff)[:3]
        print("  closest different pairs: " + "; ".join(
            f"{DIFFERENT[i][0]} ~ {DIFFERENT[i][2]} {diff[i]:.3f}" for i in order))
        order = np.argsort(same)[:3]
        print("  farthest same pairs: " + "; ".join(
            f"{SAME[i][0]} ~ {SAME[i][2]} {same[i]:.3f}" for i in order))
    # the issue's own pairs, on the canonicaliser's text
    named = [("same", SAME[0]), ("different", DIFFERENT[0]), ("different", DIFFERENT[1]),
             ("different", DIFFERENT[2])]
    sims = cosines(encoder, [p for _, p in named], key_text)
    out["named_pairs"] = []
    print("\nthe issue's pairs (key + description):")
    for (label, (a, _, b, _)), sim in zip(named, sims, strict=True):
        out["named_pairs"].append({"a": a, "b": b, "label": label, "cosine": float(sim)})
        print(f"  {a} ~ {b} ({label}): {sim:.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
