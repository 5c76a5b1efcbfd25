import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java clients driven by tests/clients/test_java.py, so that one JVM serves a whole test
 * module: a JSON command a line on stdin ({"op": ..., "bootstrap": ..., ...}), a JSON answer a
 * line on stdout ({"ok": result} or {"error": Kafka's error code, -1 for an error that has none,
 * "message": ...}). Bytes travel as base64. The clients log to stderr: stdout is the protocol's.
 */
public class ClientDriver {
    static final ObjectMapper JSON = new ObjectMapper();
    static final Duration TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        PrintStream answers = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Commands commands = new Commands();
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = lines.readLine(); line != null; line = lines.readLine()) {
            ObjectNode answer = JSON.createObjectNode();
            try {
                answer.set("ok", commands.run(JSON.readTree(line)));
            } catch (Throwable failure) {
                Throwable cause = rootCause(failure);
                answer.put("error", cause instanceof ApiException ? Errors.forException(cause).code() : -1);
                answer.put("message", cause.toString());
            }
            answers.println(JSON.writeValueAsString(answer));
        }
        commands.close();
    }

    /** The client's own exception under the wrappers of futures and of the consumer thread. */
    static Throwable rootCause(Throwable failure) {
        while ((failure instanceof ExecutionException || failure.getClass() == KafkaException.class)
                && failure.getCause() != null) {
            failure = failure.getCause();
        }
        return failure;
    }

    static Properties settings(JsonNode command) {
        Properties properties = new Properties();
        properties.put("bootstrap.servers", command.get("bootstrap").asText());
        command.path("settings").properties().forEach(e -> properties.put(e.getKey(), e.getValue().asText()));
        return properties;
    }

    static byte[] bytes(JsonNode node) throws Exception {
        return node == null || node.isNull() ? null : node.binaryValue();
    }

    static ObjectNode record(ConsumerRecord<byte[], byte[]> record) {
        ObjectNode result = JSON.createObjectNode();
        result.put("partition", record.partition());
        result.put("offset", record.offset());
        result.put("timestamp", record.timestamp());
        result.put("key", record.key());
        result.put("value", record.value());
        ArrayNode headers = result.putArray("headers");
        for (Header header : record.headers()) {
            headers.addArray().add(header.key()).add(header.value());
        }
        return result;
    }

    static KafkaConsumer<byte[], byte[]> consumer(Properties properties) {
        return new KafkaConsumer<>(properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static ArrayNode partitions(Collection<TopicPartition> assignment) {
        ArrayNode result = JSON.createArrayNode();
        new TreeSet<>(assignment.stream().map(TopicPartition::partition).toList()).forEach(result::add);
        return result;
    }
}

/** One method per command; the admin clients are kept per bootstrap, the group consumers by name. */
class Commands {
    final Map<String, Admin> admins = new HashMap<>();
    final Map<String, GroupConsumer> consumers = new HashMap<>();

    JsonNode run(JsonNode command) throws Exception {
        String op = command.get("op").asText();
        switch (op) {
            case "produce": return produce(command);
            case "read": return read(command);
            case "offset_for_time": return offsetForTime(command);
            case "consumer_start": {
                GroupConsumer consumer = new GroupConsumer(command);
                consumers.put(command.get("name").asText(), consumer);
                consumer.start();
                return NullNode.instance;
            }
            case "consumer_state": return consumers.get(command.get("name").asText()).state();
            case "consumer_stop": return consumers.remove(command.get("name").asText()).finish();
            default: return new AdminCommands(admin(command), command).run(op);
        }
    }

    /** Sends the records in order and waits for each acknowledgement: the offsets, -1 where unknown (acks=0). */
    JsonNode produce(JsonNode command) throws Exception {
        String topic = command.get("topic").asText();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(ClientDriver.settings(command),
                new ByteArraySerializer(), new ByteArraySerializer())) {
            for (JsonNode record : command.get("records")) {
                List<Header> headers = new ArrayList<>();
                for (JsonNode header : record.get("headers")) {
                    headers.add(new RecordHeader(header.get(0).asText(), header.get(1).binaryValue()));
                }
                Long timestamp = record.get("timestamp").isNull() ? null : record.get("timestamp").asLong();
                sent.add(producer.send(new ProducerRecord<>(topic, record.get("partition").asInt(), timestamp,
                        ClientDriver.bytes(record.get("key")), ClientDriver.bytes(record.get("value")), headers)));
            }
            producer.flush();
            ArrayNode offsets = ClientDriver.JSON.createArrayNode();
            for (Future<RecordMetadata> acknowledged : sent) {
                RecordMetadata metadata = acknowledged.get();
                offsets.add(metadata.hasOffset() ? metadata.offset() : -1);
            }
            return offsets;
        }
    }

    /** `count` records of one partition from offset `start`, or fewer once `timeout_ms` passed. */
    JsonNode read(JsonNode command) {
        TopicPartition partition = new TopicPartition(command.get("topic").asText(), command.get("partition").asInt());
        int count = command.get("count").asInt();
        ArrayNode records = ClientDriver.JSON.createArrayNode();
        try (KafkaConsumer<byte[], byte[]> consumer = ClientDriver.consumer(ClientDriver.settings(command))) {
            consumer.assign(List.of(partition));
            consumer.seek(partition, command.get("start").asLong());
            long deadline = System.currentTimeMillis() + command.get("timeout_ms").asLong();
            while (records.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    records.add(ClientDriver.record(record));
                }
            }
        }
        return records;
    }

    JsonNode offsetForTime(JsonNode command) {
        TopicPartition partition = new TopicPartition(command.get("topic").asText(), command.get("partition").asInt());
        try (KafkaConsumer<byte[], byte[]> consumer = ClientDriver.consumer(ClientDriver.settings(command))) {
            OffsetAndTimestamp found = consumer.offsetsForTimes(Map.of(partition, command.get("timestamp").asLong()),
                    ClientDriver.TIMEOUT).get(partition);
            return found == null ? NullNode.instance : ClientDriver.JSON.getNodeFactory().numberNode(found.offset());
        }
    }

    Admin admin(JsonNode command) {
        return admins.computeIfAbsent(command.get("bootstrap").asText(), bootstrap -> {
            Properties properties = ClientDriver.settings(command);
            properties.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(ClientDriver.TIMEOUT.toMillis()));
            return Admin.create(properties);
        });
    }

    void close() throws Exception {
        for (GroupConsumer consumer : consumers.values()) {
            consumer.finish();
        }
        admins.values().forEach(Admin::close);
    }
}

/** The Admin calls, each answering what the client learned as plain JSON. */
class AdminCommands {
    final Admin admin;
    final JsonNode command;

    AdminCommands(Admin admin, JsonNode command) {
        this.admin = admin;
        this.command = command;
    }

    String text(String field) {
        return command.get(field).asText();
    }

    ConfigResource topicResource() {
        return new ConfigResource(ConfigResource.Type.TOPIC, text("topic"));
    }

    JsonNode run(String op) throws Exception {
        ObjectNode result = ClientDriver.JSON.createObjectNode();
        switch (op) {
            case "create_topic": {
                Map<String, String> configs = new HashMap<>();
                command.path("config").properties().forEach(e -> configs.put(e.getKey(), e.getValue().asText()));
                NewTopic topic = new NewTopic(text("topic"), command.get("partitions").asInt(),
                        (short) command.get("replication_factor").asInt()).configs(configs);
                admin.createTopics(List.of(topic)).all().get();
                return NullNode.instance;
            }
            case "delete_topic":
                admin.deleteTopics(List.of(text("topic"))).all().get();
                return NullNode.instance;
            case "list_topics":
                admin.listTopics().names().get().forEach(result.putArray("topics")::add);
                return result.get("topics");
            case "describe_topic": {
                TopicDescription description = admin.describeTopics(List.of(text("topic"))).allTopicNames().get().get(text("topic"));
                result.put("topic_id", description.topicId().toString());
                ArrayNode partitions = result.putArray("partitions");
                for (TopicPartitionInfo info : description.partitions()) {
                    ObjectNode partition = partitions.addObject();
                    partition.put("partition", info.partition());
                    partition.put("leader", info.leader() == null ? -1 : info.leader().id());
                    info.replicas().forEach(node -> partition.withArray("replicas").add(node.id()));
                    info.isr().forEach(node -> partition.withArray("isr").add(node.id()));
                }
                return result;
            }
            case "describe_cluster": {
                DescribeClusterResult cluster = admin.describeCluster();
                result.put("cluster_id", cluster.clusterId().get());
                result.put("controller", cluster.controller().get().id());
                ArrayNode nodes = result.putArray("nodes");
                for (Node node : cluster.nodes().get()) {
                    nodes.addObject().put("id", node.id()).put("host", node.host()).put("port", node.port());
                }
                return result;
            }
            case "describe_config":
                for (ConfigEntry entry : admin.describeConfigs(List.of(topicResource())).all().get().get(topicResource()).entries()) {
                    result.put(entry.name(), entry.value());
                }
                return result;
            case "set_config": {
                AlterConfigOp set = new AlterConfigOp(new ConfigEntry(text("key"), text("value")), AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(topicResource(), List.of(set))).all().get();
                return NullNode.instance;
            }
            case "list_groups":
                for (GroupListing group : admin.listGroups().all().get()) {
                    result.put(group.groupId(), group.groupState().map(Object::toString).orElse(""));
                }
                return result;
            case "describe_group": {
                ConsumerGroupDescription group = admin.describeConsumerGroups(List.of(text("group"))).all().get().get(text("group"));
                result.put("state", group.groupState().toString());
                result.put("coordinator", group.coordinator().id());
                ArrayNode members = result.putArray("members");
                for (MemberDescription member : group.members()) {
                    members.add(ClientDriver.partitions(member.assignment().topicPartitions()));
                }
                return result;
            }
            case "group_offsets":
                for (Map.Entry<TopicPartition, OffsetAndMetadata> entry
                        : admin.listConsumerGroupOffsets(text("group")).partitionsToOffsetAndMetadata().get().entrySet()) {
                    result.put(String.valueOf(entry.getKey().partition()), entry.getValue().offset());
                }
                return result;
            case "list_offsets": {
                TopicPartition partition = new TopicPartition(text("topic"), command.get("partition").asInt());
                JsonNode spec = command.get("spec");
                OffsetSpec offsetSpec = spec.isNumber() ? OffsetSpec.forTimestamp(spec.asLong())
                        : spec.asText().equals("earliest") ? OffsetSpec.earliest()
                        : spec.asText().equals("latest") ? OffsetSpec.latest() : OffsetSpec.maxTimestamp();
                ListOffsetsResult.ListOffsetsResultInfo info = admin.listOffsets(Map.of(partition, offsetSpec)).partitionResult(partition).get();
                return result.put("offset", info.offset()).put("timestamp", info.timestamp());
            }
            default:
                throw new IllegalArgumentException("unknown command " + op);
        }
    }
}

/**
 * A KafkaConsumer in a group, on a thread of its own (a consumer is not thread-safe): it polls
 * until finished, commits synchronously what each poll returned, and keeps what it read and
 * which partitions it holds for state().
 */
class GroupConsumer extends Thread implements ConsumerRebalanceListener {
    final KafkaConsumer<byte[], byte[]> consumer;
    final String topic;
    final List<JsonNode> records = new ArrayList<>();
    final Set<TopicPartition> assignment = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
    volatile boolean finishing;
    volatile Throwable failure;

    GroupConsumer(JsonNode command) {
        Properties properties = ClientDriver.settings(command);
        properties.put(ConsumerConfig.GROUP_ID_CONFIG, command.get("group").asText());
        properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumer = ClientDriver.consumer(properties);
        topic = command.get("topic").asText();
    }

    @Override
    public void run() {
        try {
            consumer.subscribe(List.of(topic), this);
            while (!finishing) {
                ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(100));
                synchronized (this) {
                    polled.forEach(record -> records.add(ClientDriver.record(record)));
                }
                if (!polled.isEmpty()) {
                    consumer.commitSync(ClientDriver.TIMEOUT);
                }
            }
        } catch (Throwable thrown) {
            failure = thrown;
        } finally {
            consumer.close(CloseOptions.timeout(ClientDriver.TIMEOUT));
        }
    }

    @Override
    public synchronized void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        assignment.addAll(partitions);
    }

    @Override
    public synchronized void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        assignment.removeAll(partitions);
    }

    synchronized JsonNode state() throws Exception {
        if (failure != null) {
            throw new ExecutionException(failure);
        }
        ObjectNode state = ClientDriver.JSON.createObjectNode();
        state.set("assignment", ClientDriver.partitions(assignment));
        state.putArray("records").addAll(records);
        return state;
    }

    JsonNode finish() throws Exception {
        finishing = true;
        join(ClientDriver.TIMEOUT.toMillis());
        return state();
    }
}
