"""The pure domain core: timeline, lockbox, balancer, rules, planner, upserts.

No I/O, no clock, no unseeded randomness: every function is a fold
(``evolve(state, event) -> state``) or a decision (``decide(state, command) ->
[events]``) over values from :mod:`events`. The parts arrive with their issues;
a test guards that nothing here imports Kafka, Faust, Spark or RocksDB.
"""
