package dev.runtrail.ai4j;

import io.github.lnyocly.ai4j.agent.event.AgentEvent;
import io.github.lnyocly.ai4j.agent.event.AgentListener;
import java.lang.System.Logger.Level;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Publishes ai4j's {@link AgentEvent}s to runtrail's events topic, in runtrail's wire format,
 * keyed by run ID (kafka-clients' default partitioner hashes keys with murmur2, as the Python
 * publisher's {@code murmur2_random} does, so a run's events share a partition whichever
 * language wrote them). Attach it next to any other listener:
 *
 * <pre>{@code
 * RuntrailAgentListener runtrail = RuntrailAgentListener.builder()
 *     .bootstrapServers("localhost:9092").tenant("acme").build();
 * Agents.react()...eventPublisher(new AgentEventPublisher(List.of(runtrail))).build();
 * }</pre>
 *
 * <p>It never throws into the agent and never blocks it: {@link #onEvent} maps, redacts
 * ({@link Redactor}, the Python Publisher's rules) and encodes on the agent's thread, then hands
 * the record to a bounded queue that a sender thread drains into the producer. Every event not
 * published is counted by reason ({@link #stats()}) and logged: {@code skipped} (an ai4j type
 * that is not a runtrail type), {@code refused} (does not fit, secret in an identifier),
 * {@code dropped} (queue full and no spool), {@code failed} (refused by the broker, or not
 * deliverable and no spool). While the broker cannot take events they go to a local spool
 * ({@link Builder#spoolDir}, in order, behind each other) and are resent when it is back,
 * also by the next listener on the same folder after a restart.
 *
 * <p>With a content store ({@code RUNTRAIL_CONTENT_STORE_URL}, or {@link
 * Builder#contentStoreUrl}) the protected fields the privacy policy names, and any field larger
 * than its claim-check size, are sealed into that store and replaced by references after
 * redaction, before encoding ({@link ContentProtector}, the Python publisher's rules and
 * formats): the topic and the spool then hold references, and {@code runtrail erase} shreds the
 * content. An event whose content cannot be stored is refused, never sent inline.
 */
public final class RuntrailAgentListener implements AgentListener, AutoCloseable {
  private static final System.Logger LOG = System.getLogger(RuntrailAgentListener.class.getName());

  private final String topic;
  private final EventMapper mapper;
  private final WireEncoder encoder;
  private final Producer<byte[], byte[]> producer;
  private final BlockingQueue<ProducerRecord<byte[], byte[]>> queue;
  private final Thread sender;
  private final AtomicLong accepted = new AtomicLong();
  private final AtomicLong published = new AtomicLong();
  private final AtomicLong failed = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private final AtomicLong inFlight = new AtomicLong();
  private final AtomicLong spooled = new AtomicLong();
  private final Spool spool; // null: no spool (events not delivered are counted as failed)
  private final ContentProtector protector; // null: no content store, every field inline
  private final long retryMs;
  private volatile boolean spooling;
  private final Map<String, AtomicLong> skipped = new ConcurrentHashMap<>();
  private final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();
  private volatile String lastError;
  private volatile boolean closed;

  private RuntrailAgentListener(Builder b) {
    try {
      this.protector = ContentProtector.open(b.contentStoreUrl, b.keyStoreUrl, b.privacyPolicy, b.stateDir);
    } catch (java.io.IOException exc) {
      throw new java.io.UncheckedIOException("cannot open the content or key store: " + exc.getMessage(), exc);
    }
    this.topic = b.topic;
    this.mapper = new EventMapper(b.tenant, b.actorId, b.policyVersion);
    this.encoder = WireEncoder.forPublishedTypes();
    this.producer = b.producer != null ? b.producer : new KafkaProducer<>(b.producerProperties());
    this.queue = new ArrayBlockingQueue<>(b.queueCapacity);
    this.retryMs = b.spoolRetryMs;
    Spool opened = null;
    if (b.spoolDir != null) {
      try {
        opened = Spool.open(b.spoolDir, b.tenant, b.topic);
      } catch (java.io.IOException exc) {
        warn("no spool (events not delivered will be counted as failed): " + exc);
      }
    }
    this.spool = opened;
    if (spool != null && spool.depth() > 0) {
      spooling = true; // a previous process left events: they go first
      warn("found " + spool.depth() + " spooled event(s) in " + spool.path() + "; sending them before new ones");
    }
    this.sender = new Thread(this::drain, "runtrail-ai4j-sender");
    this.sender.setDaemon(true);
    this.sender.start();
  }

  public static Builder builder() {
    return new Builder();
  }

  /** The mapper, e.g. to continue a resumed run's sequence ({@link EventMapper#setNextSequence}). */
  public EventMapper mapper() {
    return mapper;
  }

  @Override
  public void onEvent(AgentEvent event) {
    try {
      if (closed) {
        count(refused, "listener closed");
        return;
      }
      java.util.List<Map<String, Object>> forms = mapper.map(event);
      if (forms == null) {
        String type = String.valueOf(event.getType());
        boolean terminal = type.equals("FINAL_OUTPUT") || type.equals("ERROR"); // a second one
        count(skipped, terminal ? type + " after the run ended" : type);
        return;
      }
      java.util.List<ProducerRecord<byte[], byte[]>> records = new java.util.ArrayList<>(forms.size());
      for (Map<String, Object> form : forms) { // all encoded before any is queued: none or all
        records.add(record(form));
      }
      for (ProducerRecord<byte[], byte[]> record : records) {
        enqueue(record);
      }
    } catch (EventMapper.Refused | WireEncoder.DoesNotFit | Redactor.SecretInIdentifier
        | ContentProtector.ProtectFailed exc) {
      count(refused, exc.getClass().getSimpleName() + ": " + exc.getMessage());
    } catch (Throwable exc) { // never into the agent
      count(refused, "unexpected " + exc.getClass().getName() + ": " + exc.getMessage());
    }
  }

  /**
   * Ends {@code runId} as failed when ai4j threw without an ERROR event (its non-streaming
   * {@code Agent.run} does when the model call fails): {@code try { agent.run(req); } catch
   * (Exception e) { runtrail.runFailed(runId, e); throw e; }}. Nothing when the run already
   * has its terminal event (a streamed run's ERROR) or published nothing; never throws.
   */
  public void runFailed(String runId, Throwable error) {
    try {
      java.util.List<Map<String, Object>> forms = mapper.failRun(runId, error);
      if (forms == null) {
        count(skipped, "runFailed for a run that ended or never started");
        return;
      }
      for (Map<String, Object> form : forms) {
        enqueue(record(form));
      }
    } catch (Throwable exc) { // never into the agent
      count(refused, "runFailed: " + exc.getClass().getName() + ": " + exc.getMessage());
    }
  }

  /** Redacted, then protected (references in place of content), then encoded: in this order. */
  private ProducerRecord<byte[], byte[]> record(Map<String, Object> mapped) {
    Map<String, Object> form = Redactor.redact(mapped);
    if (protector != null) {
      form = protector.protect(form);
    }
    byte[] value = encoder.encode(form);
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(topic, ((String) form.get("runId")).getBytes(StandardCharsets.UTF_8), value);
    record.headers().add("rt.type", bytes(form.get("type")));
    record.headers().add("rt.schema_version", bytes(form.get("schemaVersion")));
    record.headers().add("rt.tenant", bytes(form.get("tenantId")));
    record.headers().add("rt.event_id", bytes(form.get("eventId")));
    return record;
  }

  private void enqueue(ProducerRecord<byte[], byte[]> record) {
    inFlight.incrementAndGet();
    if (!queue.offer(record)) {
      inFlight.decrementAndGet();
      if (!toSpool(record, "the queue is full (" + queue.size() + " records waiting)")) {
        dropped.incrementAndGet();
        warn("queue full (" + queue.size() + " records waiting): dropped " + header(record, "rt.type")
            + " of run " + new String(record.key(), StandardCharsets.UTF_8));
      }
      return;
    }
    accepted.incrementAndGet();
  }

  private void drain() {
    long lastTry = 0;
    while (true) {
      ProducerRecord<byte[], byte[]> record;
      try {
        record = queue.poll(Math.max(10, retryMs / 4), TimeUnit.MILLISECONDS);
      } catch (InterruptedException exc) {
        return;
      }
      if (record != null && spooling) { // behind what is spooled already, in order
        inFlight.decrementAndGet();
        if (!toSpool(record, "spooling")) {
          failed.incrementAndGet();
        }
      } else if (record != null) {
        send(record);
      }
      if (spooling && System.currentTimeMillis() - lastTry >= retryMs) {
        resendSpool();
        // measured from the end of the try: an unreachable broker costs a whole send timeout,
        // and the records that came meanwhile go to the spool before the next one
        lastTry = System.currentTimeMillis();
      }
    }
  }

  private void send(ProducerRecord<byte[], byte[]> record) {
    try {
      producer.send(record, (meta, exc) -> {
        if (exc == null) {
          published.incrementAndGet();
        } else if (exc instanceof org.apache.kafka.common.errors.RetriableException && toSpool(record, exc.toString())) {
          // spooled: resent when the broker is back
        } else {
          failed.incrementAndGet();
          warn("not delivered: " + exc);
        }
        inFlight.decrementAndGet();
      });
    } catch (RuntimeException exc) { // producer closed, or interrupted while waiting
      if (!toSpool(record, exc.toString())) {
        failed.incrementAndGet();
        warn("send failed: " + exc);
      }
      inFlight.decrementAndGet();
    }
  }

  /** Append to the spool and enter spooling mode; false when there is no usable spool. */
  private boolean toSpool(ProducerRecord<byte[], byte[]> record, String why) {
    if (spool == null) {
      return false;
    }
    try {
      spool.append(record, header(record, "rt.event_id"));
    } catch (java.io.IOException exc) {
      warn("event LOST: cannot write the spool " + spool.path() + ": " + exc);
      return false;
    }
    spooled.incrementAndGet();
    if (!spooling) {
      spooling = true;
      warn("spooling events to " + spool.path() + ": " + why);
    }
    return true;
  }

  /** Resend the spool from its start; drop what the broker acknowledged, in one piece. */
  private void resendSpool() {
    try {
      java.util.List<Spool.Entry> entries = spool.read(10_000, topic);
      if (entries.isEmpty()) {
        spooling = false;
        return;
      }
      int acked = 0;
      long end = 0;
      // the first alone (an unreachable broker costs one timeout), then the rest pipelined:
      // the idempotent producer keeps their order, and the acknowledged prefix is dropped
      java.util.List<java.util.concurrent.Future<?>> sent = new java.util.ArrayList<>();
      sent.add(producer.send(entries.get(0).record()));
      try {
        sent.get(0).get();
        for (Spool.Entry entry : entries.subList(1, entries.size())) {
          sent.add(producer.send(entry.record()));
        }
      } catch (java.util.concurrent.ExecutionException exc) {
        // the broker is still away: nothing was acknowledged
      }
      for (int i = 0; i < sent.size(); i++) {
        try {
          sent.get(i).get();
        } catch (java.util.concurrent.ExecutionException exc) {
          break;
        }
        acked++;
        end = entries.get(i).end();
      }
      if (acked > 0) {
        spool.dropPrefix(end, acked);
        published.addAndGet(acked);
      }
      if (spool.depth() == 0) {
        spooling = false;
        warn("spool " + spool.path() + " sent: back to direct sending");
      }
    } catch (InterruptedException exc) {
      Thread.currentThread().interrupt();
    } catch (java.io.IOException | RuntimeException exc) {
      warn("spool resend failed (will retry): " + exc);
    }
  }

  private static String header(ProducerRecord<byte[], byte[]> record, String name) {
    org.apache.kafka.common.header.Header h = record.headers().lastHeader(name);
    return h == null ? null : new String(h.value(), StandardCharsets.UTF_8);
  }

  /** Wait until the spool is empty and nothing is in flight; false on timeout. */
  public boolean drainSpool(Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      if (!spooling && inFlight.get() == 0 && (spool == null || spool.depth() == 0)) {
        return true;
      }
      try {
        Thread.sleep(20);
      } catch (InterruptedException exc) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
    return false;
  }

  /** Wait until every accepted event is delivered or failed; false on timeout. */
  public boolean flush(Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      if (queue.isEmpty()) {
        producer.flush();
      }
      if (inFlight.get() == 0) {
        return true;
      }
      try {
        Thread.sleep(5);
      } catch (InterruptedException exc) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
    return inFlight.get() == 0;
  }

  /**
   * Flush (up to 30 s), close the producer and stop the sender. Events still queued then are
   * counted as failed (and logged), never forgotten.
   */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    try { // run.succeeded still waiting for a STEP_END that never came: the run did end
      for (Map<String, Object> form : mapper.endPending()) {
        enqueue(record(form));
      }
    } catch (RuntimeException exc) {
      count(refused, "pending run.succeeded: " + exc.getMessage());
    }
    flush(Duration.ofSeconds(30));
    closed = true;
    producer.close(Duration.ofSeconds(5)); // also ends a send waiting for the broker
    sender.interrupt();
    try {
      sender.join(TimeUnit.SECONDS.toMillis(5));
    } catch (InterruptedException exc) {
      Thread.currentThread().interrupt();
    }
    java.util.List<ProducerRecord<byte[], byte[]>> left = new java.util.ArrayList<>();
    queue.drainTo(left);
    int lost = 0;
    for (ProducerRecord<byte[], byte[]> record : left) {
      inFlight.decrementAndGet();
      if (!toSpool(record, "closing")) {
        lost++;
      }
    }
    if (lost > 0) {
      failed.addAndGet(lost);
      warn("closed with " + lost + " event(s) never sent");
    }
    if (protector != null) {
      try {
        protector.close();
      } catch (java.io.IOException exc) {
        warn("cannot close the content store: " + exc);
      }
    }
    if (spool != null) {
      try {
        if (spool.depth() > 0) {
          warn("closed with " + spool.depth() + " event(s) in the spool " + spool.path());
        }
        spool.close();
      } catch (java.io.IOException exc) {
        warn("cannot close the spool: " + exc);
      }
    }
  }

  /** Counters: accepted, published, failed, dropped, inFlight, skipped.TYPE, refused.REASON. */
  public Map<String, Object> stats() {
    Map<String, Object> out = new TreeMap<>();
    out.put("accepted", accepted.get());
    out.put("published", published.get());
    out.put("failed", failed.get());
    out.put("dropped", dropped.get());
    out.put("inFlight", inFlight.get());
    out.put("spooled", spooled.get());
    out.put("spoolDepth", spool == null ? 0 : spool.depth());
    skipped.forEach((k, v) -> out.put("skipped." + k, v.get()));
    refused.forEach((k, v) -> out.put("refused." + k, v.get()));
    if (lastError != null) {
      out.put("lastError", lastError);
    }
    return out;
  }

  private void count(Map<String, AtomicLong> counters, String reason) {
    counters.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
    if (counters == refused) {
      warn("event refused: " + reason);
    }
  }

  private void warn(String message) {
    lastError = message;
    LOG.log(Level.WARNING, "runtrail-ai4j: " + message);
  }

  private static byte[] bytes(Object value) {
    return String.valueOf(value).getBytes(StandardCharsets.UTF_8);
  }

  /** Settings; the producer's delivery invariants (idempotence, acks=all) always win. */
  public static final class Builder {
    private String bootstrapServers = "localhost:9092";
    private String topic = "runtrail.events";
    private String tenant = "default";
    private String actorId = "runtrail-ai4j";
    private String policyVersion = "ai4j";
    private int queueCapacity = 100_000;
    private long deliveryTimeoutMs = 120_000;
    private final Properties extra = new Properties();
    private Producer<byte[], byte[]> producer;
    private java.nio.file.Path spoolDir = java.nio.file.Path.of(".runtrail", "spool");
    private long spoolRetryMs = 1000;
    // the Python publisher's settings, read from the same environment variables by default
    private String contentStoreUrl = System.getenv("RUNTRAIL_CONTENT_STORE_URL");
    private String keyStoreUrl = System.getenv("RUNTRAIL_KEY_STORE_URL");
    private String privacyPolicy = System.getenv("RUNTRAIL_PRIVACY_POLICY");
    private java.nio.file.Path stateDir =
        java.nio.file.Path.of(System.getenv().getOrDefault("RUNTRAIL_STATE_DIR", ".runtrail"));

    /**
     * Where protected content is sealed ({@code file:///dir[?name=…&fsync=true]}; default
     * {@code RUNTRAIL_CONTENT_STORE_URL}); null: every field travels inline. Other schemes
     * (s3, postgresql) are refused by {@link #build} with the scheme's name.
     */
    public Builder contentStoreUrl(String value) {
      contentStoreUrl = value;
      return this;
    }

    /** Data keys and tenant keys ({@code file:///dir}; default {@code RUNTRAIL_KEY_STORE_URL}, else {@code <stateDir>/keys}). */
    public Builder keyStoreUrl(String value) {
      keyStoreUrl = value;
      return this;
    }

    /** The privacy policy as JSON (default {@code RUNTRAIL_PRIVACY_POLICY}; docs/PRIVACY.md). */
    public Builder privacyPolicy(String json) {
      privacyPolicy = json;
      return this;
    }

    /** The local state folder the default key store lives in (default {@code RUNTRAIL_STATE_DIR}, else .runtrail). */
    public Builder stateDir(java.nio.file.Path value) {
      stateDir = value;
      return this;
    }

    /** Where undeliverable events wait (as the Python publisher's spool_dir); null: no spool. */
    public Builder spoolDir(java.nio.file.Path value) {
      spoolDir = value;
      return this;
    }

    /** How often a spooling listener tries the broker again. */
    public Builder spoolRetryMs(long value) {
      spoolRetryMs = Math.max(10, value);
      return this;
    }

    public Builder bootstrapServers(String value) {
      bootstrapServers = value;
      return this;
    }

    public Builder topic(String value) {
      topic = value;
      return this;
    }

    public Builder tenant(String value) {
      tenant = value;
      return this;
    }

    public Builder actorId(String value) {
      actorId = value;
      return this;
    }

    /** The policyVersion of each run's run.accepted (the agent's policy/config version). */
    public Builder policyVersion(String value) {
      policyVersion = value;
      return this;
    }

    public Builder queueCapacity(int value) {
      if (value < 1) {
        throw new IllegalArgumentException("queueCapacity must be >= 1");
      }
      queueCapacity = value;
      return this;
    }

    public Builder deliveryTimeoutMs(long value) {
      deliveryTimeoutMs = value;
      return this;
    }

    /** Any other kafka-clients producer setting (SASL, TLS, client.id…). */
    public Builder kafkaProperty(String key, String value) {
      extra.setProperty(key, value);
      return this;
    }

    /**
     * Every setting of a properties file, as {@link #kafkaProperty} (e.g. the
     * {@code clients/<principal>.properties} of {@code runtrail kafka up --security}). Secrets
     * belong in files the properties point at through a config provider, not in the file.
     */
    public Builder kafkaProperties(java.nio.file.Path file) throws java.io.IOException {
      Properties loaded = new Properties();
      try (java.io.Reader in = java.nio.file.Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
        loaded.load(in);
      }
      for (String key : loaded.stringPropertyNames()) {
        extra.setProperty(key, loaded.getProperty(key));
      }
      return this;
    }

    /** A producer of one's own (its partitioner must stay the default for keyed records). */
    public Builder producer(Producer<byte[], byte[]> value) {
      producer = value;
      return this;
    }

    public RuntrailAgentListener build() {
      return new RuntrailAgentListener(this);
    }

    Properties producerProperties() {
      Properties p = new Properties();
      p.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "runtrail-ai4j");
      p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
      p.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
      // how long a send waits for the broker's metadata before the event goes to the spool
      p.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, "5000");
      p.putAll(extra);
      // murmur2 on the key, as the Python publisher: a custom partitioner would split runs
      p.remove(ProducerConfig.PARTITIONER_CLASS_CONFIG);
      p.remove(ProducerConfig.PARTITIONER_IGNORE_KEYS_CONFIG);
      p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
      p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
      p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
      p.setProperty(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(deliveryTimeoutMs));
      if (Long.parseLong(p.getProperty(ProducerConfig.LINGER_MS_CONFIG)) + 30_000 > deliveryTimeoutMs) {
        p.setProperty(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Long.toString(Math.max(1000, deliveryTimeoutMs / 2)));
      }
      return p;
    }
  }
}
