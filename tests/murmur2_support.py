"""Kafka's Java partitioner, implemented independently of librdkafka: where a Java producer (an ERP, Kafka
Streams) puts a key, to check that our producers agree (tests/integration/kafka/test_partitioning.py) and to
pick keys that librdkafka's default partitioner puts elsewhere (tests/e2e/test_submissions.py)."""

from __future__ import annotations


def java_murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c), as the signed int Java returns."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """`BuiltInPartitioner.partitionForKey`: `Utils.toPositive(Utils.murmur2(key)) % numPartitions`."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions
