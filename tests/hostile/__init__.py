"""A hostile client's toolkit: the cases of the adversarial fuzzer (tests/net/test_fuzz.py) and of
the latency benchmark beside it (bench/hostile.py).

    seeds.py             a valid request of every API and version replog advertises, from kio's schemas
    frame_map.py         where the lengths, counts, values and arrays lie in an encoded request
    mutations.py         frames from the seeds: hostile counts and values, truncations, lies, wide arrays
    batches.py           record batches: a small encoder, codecs, decompression bombs
    wire.py              a blocking Kafka connection for hostile bytes, and the requests checking them
    cases.py             what a case is and what it attacks; the frame cases
    batch_cases.py       Produce with wrong, hostile and valid batches; decompression bombs
    connection_cases.py  slow senders and floods
    catalog.py           the families of cases a run goes through
    witness.py           a well-behaved confluent-kafka producer and consumer on the same broker
    arena.py             a broker under an address-space and a file limit, checked after every case
    __main__.py          `python -m tests.hostile`: the fuzzer at a running broker, for the benchmark
"""
