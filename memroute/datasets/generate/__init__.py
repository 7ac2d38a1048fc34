"""Seeded dataset generators: synthetic LoCoMo-format conversations (:mod:`.synthetic`) and
LongMemEval-format questions (:mod:`.longmemeval`). Their word lists and sentence templates are
data (``data/*.json``); the functions that draw values from the seeded generator are code."""
