"""The Spark Structured Streaming balancer (issue 8): the core's placement fold in Spark state, moves on Kafka.

- :mod:`~streaming.balancer.placement`: the placement fold and run numbers, and their stored form (no Spark);
- :mod:`~streaming.balancer.batch`: one micro-batch (fold the records, balance each tier, queue the moves);
- :mod:`~streaming.balancer.commands`: moves as LoadSegment / DropSegment with deterministic ids;
- :mod:`~streaming.balancer.state`: the Spark stateful processor (RocksDB state, the live placement per worker);
- :mod:`~streaming.balancer.job`: the streaming query, its Kafka sink and the command line.
"""
