"""The Spark Structured Streaming balancer (issue 8): rolling cost caches per tier, move commands on Kafka.

- :mod:`~streaming.balancer.placement`: one tier's placement folded from the log (no Spark);
- :mod:`~streaming.balancer.batch`: one micro-batch of one tier (fold, roll caches, the pure balancing stages);
- :mod:`~streaming.balancer.commands`: moves as LoadSegment / DropSegment with deterministic ids;
- :mod:`~streaming.balancer.state`: the Spark stateful processor (RocksDB state, live placements per worker);
- :mod:`~streaming.balancer.job`: the streaming query, its Kafka sink and the command line.
"""
