"""A compacting summary tree as a memory strategy, to compare with verbatim turn-pairs."""

from memroute.memory.summary.compactor import Compaction, Compactor
from memroute.memory.summary.memory import SummaryMemory
from memroute.memory.summary.tree import SummaryNode, UserTree

__all__ = ["Compaction", "Compactor", "SummaryMemory", "SummaryNode", "UserTree"]
