"""Where replog answers differently from Kafka, scenario by scenario: the one place that says so.

INTENDED: scenario -> {part of its result: why replog differs}. A part is a path of keys from
the result's root, joined by "/" (list items by index; "*" stands for any one key; "" is the
whole result). The comparison leaves out exactly the listed parts, and fails when a listed part
no longer differs, so that no listing outlives its difference.
"""

from __future__ import annotations

# bench/peers/kafka sets a few of Kafka's settings to replog's defaults in its server.properties,
# so that the two are compared on the same terms.
PEER_SETTING = ("the Kafka peer sets it to replog's default in its server.properties (bench/peers/kafka): Kafka "
                "reports STATIC_BROKER_CONFIG where replog's value is its own default")

INTENDED: dict[str, dict[str, str]] = {
    "api_versions_beyond_the_broker": {
        "api_versions_range": "replog advertises the ApiVersions versions its codec (kio) has, up to v4; Kafka 4.4 has v5. "
                              "Clients negotiate down to the highest common version",
    },
    "fetch_out_of_range": {
        "*/high_watermark": "replog's followers continue from the log start named in an OFFSET_OUT_OF_RANGE answer "
                            "(replication/fetcher.py), so the answer carries the partition's offsets; Kafka answers -1 "
                            "and its followers ask ListOffsets. Consumers read no offsets from an error answer",
        "*/log_start_offset": "as */high_watermark",
    },
    "topic_config_values": {
        "configs/segment.bytes/source": PEER_SETTING,
        "configs/min.insync.replicas/source": "Kafka 4 records the broker's min.insync.replicas as a cluster-wide "
                                              "dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG, for eligible leader "
                                              "replicas, KIP-966); replog's is a static broker setting left at its default",
    },
    "broker_configs": {
        "names": "replog's broker configs are its own: the Kafka ones it implements, under Kafka's names, and its "
                 "own (coord.url, state.change.*, metrics.*); KRaft, SASL, TLS, remote storage, share and streams "
                 "groups, transactions and quotas are Kafka's alone",
        "client_facing/*/read_only": "replog's broker settings are set at start-up (read-only), but for the "
                                     "reassignment throttle rates (config.DYNAMIC_BROKER_SETTINGS); Kafka changes "
                                     "these while it runs",
        **{f"client_facing/{name}/source": PEER_SETTING
           for name in ("log.segment.bytes", "auto.create.topics.enable", "num.partitions", "default.replication.factor")},
        "client_facing/min.insync.replicas/source": "as topic_config_values' min.insync.replicas: Kafka 4 records it "
                                                    "as a cluster-wide dynamic default",
        "client_facing/compression.type": "a topic setting only in replog: a topic without one keeps batches as "
                                          "their producers compressed them (Kafka's broker default, producer); "
                                          "there is no broker-wide default to change it",
        "client_facing/log.retention.hours": "replog's broker retention is log.retention.ms alone",
        "client_facing/log.retention.ms/value": "Kafka leaves log.retention.ms unset (null) and derives it from "
                                                "log.retention.hours; replog states it",
    },
}
