"""A hostile client's toolkit: the cases of the adversarial fuzzer (tests/net/test_fuzz.py) and of
the latency benchmark beside it (bench/hostile.py).

    seeds.py      a valid request of every API and version replog advertises, from kio's schemas
    frame_map.py  where the lengths and counts lie in an encoded request
    mutations.py  frames from the seeds: inflated and negative counts, truncations, lies, noise
    batches.py    record batches: a small encoder, wrong batches, decompression bombs
    wire.py       a blocking Kafka connection for hostile bytes and the requests checking them
    attacks.py    the cases: frames, batches, slow senders, floods; and the catalog of them
    witness.py    a well-behaved confluent-kafka producer and consumer on the same broker
    arena.py      a broker under an address-space limit, checked after every case
    __main__.py   `python -m tests.hostile`: the fuzzer at a running broker
"""
