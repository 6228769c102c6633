"""Spark Structured Streaming reads a topic of the real broker and writes transformed records to another."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer

from events import Topics
from events.topics import SEGMENTS
from streaming.admin import create_topic
from streaming.examples import example_envelopes
from streaming.producer import EventProducer

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_spark_reads_events_and_writes_transformed_records(
    kafka_bootstrap: str, topics: Topics, spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    envs = [e for e in example_envelopes(1_795_219_200_000) if e.event.event_topic == SEGMENTS]
    producer = EventProducer(kafka_bootstrap, topics)
    for env in envs:
        producer.send(env)
    producer.flush()
    out_topic = f"spark-out-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, out_topic)

    envelope_schema = StructType([
        StructField("event_type", StringType()),
        StructField("event_id", StringType()),
        StructField("key", StringType()),
    ])
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topics.name(SEGMENTS))
        .option("startingOffsets", "earliest")
        .load()
    )
    parsed = source.select(F.from_json(F.col("value").cast("string"), envelope_schema).alias("e"), "offset")
    transformed = parsed.select(
        F.col("e.key").alias("key"),
        F.to_json(F.struct(
            F.col("e.event_id").alias("eventId"),
            F.upper(F.col("e.event_type")).alias("type"),
            F.col("offset").alias("sourceOffset"),
        )).alias("value"),
    )
    query = (
        transformed.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", out_topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([out_topic])
    got = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append((msg.key().decode(), orjson.loads(msg.value())))
            if len(got) == len(envs):
                break
    finally:
        consumer.close()
    assert got == [
        (env.key, {"eventId": env.event_id, "type": env.event_type.upper(), "sourceOffset": i})
        for i, env in enumerate(envs)
    ]
