package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import com.alibaba.fastjson2.JSONWriter;
import io.github.lnyocly.ai4j.agent.Agent;
import io.github.lnyocly.ai4j.agent.AgentOptions;
import io.github.lnyocly.ai4j.agent.AgentRequest;
import io.github.lnyocly.ai4j.agent.Agents;
import io.github.lnyocly.ai4j.agent.event.AgentEvent;
import io.github.lnyocly.ai4j.agent.event.AgentEventPublisher;
import io.github.lnyocly.ai4j.agent.event.AgentListener;
import io.github.lnyocly.ai4j.agent.model.AgentModelClient;
import io.github.lnyocly.ai4j.agent.model.AgentModelResult;
import io.github.lnyocly.ai4j.agent.model.AgentModelStreamListener;
import io.github.lnyocly.ai4j.agent.model.AgentPrompt;
import io.github.lnyocly.ai4j.agent.replay.IoCaptureAgentListener;
import io.github.lnyocly.ai4j.agent.replay.JsonlIoCaptureSink;
import io.github.lnyocly.ai4j.agent.tool.AgentToolCall;
import io.github.lnyocly.ai4j.agent.tool.StaticToolRegistry;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.utils.Utils;

/**
 * What the Python tests (tests/test_adapter_ai4j*.py) run on the Java side, JSON on stdin and
 * stdout. Modes:
 *
 * <ul>
 *   <li>{@code encode}: stdin a JSON array of complete JSON-form events; stdout, per event, the
 *       hex of the wire bytes or {"error": reason}.
 *   <li>{@code redact}: stdin {"values": [...], "forms": [...]}; stdout the same lists redacted
 *       ({@link Redactor#redactValue}, {@link Redactor#redact}; a refused form as {"refused"}).
 *   <li>{@code protect}: stdin a JSON array of JSON-form events; stdout the same events with
 *       their protected content replaced by references ({@link ContentProtector}, configured
 *       from the environment as the listener is), or {"error": why} when the stores cannot be
 *       opened (an unsupported scheme).
 *   <li>{@code partition}: stdin {"partitions": n, "keys": [...]}; kafka-clients' partition of
 *       each key (murmur2 of its UTF-8 bytes).
 *   <li>{@code run BOOTSTRAP TOPIC TENANT CAPTURE_DIR RUN_ID...}: a real ai4j ReAct agent (scripted
 *       model and tool, no network) per run ID with ai4j's IoCaptureAgentListener (a JSONL file
 *       per run) and a RuntrailAgentListener attached; stdout the listener's stats. A run ID
 *       {@code fail:ID} runs ID with a model that fails (ai4j reports ERROR, runStream throws);
 *       {@code failsync:ID} the same through {@code Agent.run} (no ERROR: runFailed ends it).
 *       With {@code AI4J_DRIVER_SECRET} set, every run's input also holds {@code SECRET-runId}
 *       (a per-run sentinel for the privacy tests; in the {@code down} mode too).
 *   <li>{@code events RUN_ID [fail|fail-sync]}: the ai4j events of one run (fail-sync: the
 *       failing model through {@code Agent.run}, not streaming), and the runtrail events the
 *       mapper makes of them (JSON forms, not redacted).
 *   <li>{@code down BOOTSTRAP QUEUE RUNS SPOOL_DIR|- LIVE|- TOPIC}: agent runs against a broker
 *       that is not there (queue capacity QUEUE, 2 s timeouts), then, with LIVE, one more run
 *       by a new listener on the same spool and a live broker: the counters of both.
 *   <li>{@code bench BOOTSTRAP TOPIC ROUNDS}: the same agent with and without the listener.
 * </ul>
 */
public final class Driver {
  private Driver() {}

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    Object out;
    switch (mode) {
      case "encode":
        out = encode(JSON.parseArray(stdin()));
        break;
      case "redact":
        out = redact(JSON.parseObject(stdin()));
        break;
      case "partition":
        out = partition(JSON.parseObject(stdin()));
        break;
      case "protect":
        out = protect(JSON.parseArray(stdin()));
        break;
      case "run":
        out = run(args);
        break;
      case "events":
        out = events(args[1], args.length > 2 && args[2].startsWith("fail"), args.length > 2 && args[2].equals("fail-sync"));
        break;
      case "down":
        out = down(args[1], Integer.parseInt(args[2]), Integer.parseInt(args[3]), args[4], args[5], args[6]);
        break;
      case "cost":
        out = cost(Integer.parseInt(args[1]));
        break;
      case "bench":
        out = bench(args[1], args[2], Integer.parseInt(args[3]));
        break;
      default:
        throw new IllegalArgumentException("unknown mode " + mode);
    }
    System.out.write(JSON.toJSONString(out, JSONWriter.Feature.WriteMapNullValue).getBytes(StandardCharsets.UTF_8));
    System.out.flush();
    System.exit(0); // kafka-clients leaves non-daemon threads behind on some paths
  }

  private static String stdin() throws Exception {
    return new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
  }

  @SuppressWarnings("unchecked")
  static JSONArray encode(JSONArray forms) {
    WireEncoder encoder = WireEncoder.forPublishedTypes();
    JSONArray out = new JSONArray();
    for (Object form : forms) {
      try {
        out.add(HexFormat.of().formatHex(encoder.encode((Map<String, Object>) form)));
      } catch (RuntimeException exc) {
        out.add(Map.of("error", String.valueOf(exc.getMessage())));
      }
    }
    return out;
  }

  @SuppressWarnings("unchecked")
  static JSONObject redact(JSONObject input) {
    JSONObject out = new JSONObject();
    JSONArray values = new JSONArray();
    for (Object value : input.getJSONArray("values")) {
      values.add(Redactor.redactValue(value));
    }
    JSONArray forms = new JSONArray();
    for (Object form : input.getJSONArray("forms")) {
      try {
        forms.add(Redactor.redact((Map<String, Object>) form));
      } catch (Redactor.SecretInIdentifier exc) {
        forms.add(Map.of("refused", exc.getMessage()));
      }
    }
    out.put("values", values);
    out.put("forms", forms);
    return out;
  }

  @SuppressWarnings("unchecked")
  static Object protect(JSONArray forms) throws Exception {
    ContentProtector protector;
    try {
      protector = ContentProtector.open(System.getenv("RUNTRAIL_CONTENT_STORE_URL"),
          System.getenv("RUNTRAIL_KEY_STORE_URL"), System.getenv("RUNTRAIL_PRIVACY_POLICY"),
          Path.of(System.getenv().getOrDefault("RUNTRAIL_STATE_DIR", ".runtrail")));
    } catch (IllegalArgumentException exc) {
      return Map.of("error", String.valueOf(exc.getMessage()));
    }
    JSONArray out = new JSONArray();
    try (protector) {
      for (Object form : forms) {
        out.add(protector.protect((Map<String, Object>) form));
      }
    }
    return out;
  }

  static JSONArray partition(JSONObject input) {
    int n = input.getIntValue("partitions");
    JSONArray out = new JSONArray();
    for (Object key : input.getJSONArray("keys")) {
      out.add(Utils.toPositive(Utils.murmur2(((String) key).getBytes(StandardCharsets.UTF_8))) % n);
    }
    return out;
  }

  static Map<String, Object> run(String[] args) throws Exception {
    String bootstrap = args[1];
    String topic = args[2];
    String tenant = args[3];
    Path dir = Path.of(args[4]);
    RuntrailAgentListener.Builder builder =
        RuntrailAgentListener.builder().bootstrapServers(bootstrap).topic(topic).tenant(tenant).actorId("ai4j-test")
            .spoolDir(dir.resolve("spool"));
    String properties = System.getenv("RUNTRAIL_AI4J_KAFKA_PROPERTIES"); // a secured broker's client
    if (properties != null) {
      builder.kafkaProperties(Path.of(properties));
    }
    RuntrailAgentListener runtrail = builder.build();
    for (int i = 5; i < args.length; i++) {
      boolean sync = args[i].startsWith("failsync:");
      boolean fails = sync || args[i].startsWith("fail:");
      String runId = fails ? args[i].substring(args[i].indexOf(':') + 1) : args[i];
      JsonlIoCaptureSink sink = new JsonlIoCaptureSink(dir.resolve(runId + ".jsonl"));
      IoCaptureAgentListener capture = new IoCaptureAgentListener(sink);
      Agent agent = agent(new AgentEventPublisher(List.of(capture, runtrail)), fails);
      try {
        if (sync) {
          agent.run(request(runId));
        } else {
          agent.runStream(request(runId), event -> {});
        }
      } catch (Exception exc) {
        if (!fails) {
          throw exc;
        }
        runtrail.runFailed(runId, exc); // the README's pattern; a no-op after ai4j's ERROR
      }
      sink.close();
    }
    runtrail.flush(Duration.ofSeconds(60));
    Map<String, Object> stats = runtrail.stats();
    runtrail.close();
    return stats;
  }

  static Map<String, Object> events(String runId, boolean fails, boolean sync) throws Exception {
    List<AgentEvent> seen = new ArrayList<>();
    Map<String, Object> out = new LinkedHashMap<>();
    String thrown = null;
    try {
      Agent agent = agent(new AgentEventPublisher(List.of(seen::add)), fails);
      if (sync) {
        agent.run(request(runId));
      } else {
        agent.runStream(request(runId), e -> {});
      }
    } catch (Exception exc) {
      thrown = String.valueOf(exc.getMessage());
    }
    EventMapper mapper = new EventMapper("acme", "ai4j-test");
    List<String> types = new ArrayList<>();
    List<Object> forms = new ArrayList<>();
    for (AgentEvent e : seen) {
      types.add(String.valueOf(e.getType()));
      List<Map<String, Object>> mapped = mapper.map(e);
      if (mapped != null) {
        forms.addAll(mapped);
      }
    }
    if (thrown != null) { // what the listener's runFailed does from the agent's catch
      List<Map<String, Object>> ended = mapper.failRun(runId, new IllegalStateException(thrown));
      out.put("failRun", ended == null ? null : ended.size());
      if (ended != null) {
        forms.addAll(ended);
      }
    }
    out.put("ai4j", types);
    out.put("runtrail", forms);
    out.put("thrown", thrown);
    return out;
  }

  static Map<String, Object> down(String bootstrap, int queue, int runs, String spoolDir, String live, String topic)
      throws Exception {
    RuntrailAgentListener.Builder builder = RuntrailAgentListener.builder().bootstrapServers(bootstrap)
        .topic(topic).tenant("acme").queueCapacity(queue).deliveryTimeoutMs(2000)
        .spoolDir(spoolDir.equals("-") ? null : Path.of(spoolDir)).spoolRetryMs(500)
        .kafkaProperty("max.block.ms", "2000").kafkaProperty("request.timeout.ms", "1000");
    RuntrailAgentListener runtrail = builder.build();
    List<AgentEvent> seen = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int i = 0; i < runs; i++) {
      agent(new AgentEventPublisher(List.of(seen::add, runtrail))).runStream(request("down-" + i), e -> {});
    }
    long agentMs = (System.nanoTime() - t0) / 1_000_000;
    boolean flushed = runtrail.flush(Duration.ofSeconds(60));
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("agentMs", agentMs);
    out.put("events", seen.size());
    out.put("flushed", flushed);
    runtrail.close();
    out.put("stats", runtrail.stats());
    if (!live.equals("-")) { // a new listener on the same spool, the broker back: it resends
      RuntrailAgentListener back = RuntrailAgentListener.builder().bootstrapServers(live).topic(topic)
          .tenant("acme").spoolDir(Path.of(spoolDir)).spoolRetryMs(200).build();
      agent(new AgentEventPublisher(List.of(back))).runStream(request("after-" + runs), e -> {});
      out.put("drained", back.drainSpool(Duration.ofSeconds(60)));
      back.close();
      out.put("after", back.stats());
    }
    return out;
  }

  /** Where the listener's time goes, per event: map, redact, encode (no broker). */
  static Map<String, Object> cost(int rounds) throws Exception {
    List<AgentEvent> events = new ArrayList<>();
    agent(new AgentEventPublisher(List.of(events::add))).runStream(request("cost"), e -> {});
    EventMapper mapper = new EventMapper("acme", "x");
    WireEncoder encoder = WireEncoder.forPublishedTypes();
    long map = 0;
    long redact = 0;
    long encode = 0;
    long n = 0;
    for (int r = 0; r < rounds; r++) {
      for (AgentEvent e : events) {
        long t0 = System.nanoTime();
        java.util.List<Map<String, Object>> forms = mapper.map(e);
        if (forms == null) {
          continue;
        }
        long t1 = System.nanoTime();
        long t2 = t1;
        long t3 = t1;
        for (Map<String, Object> form : forms) {
          long a = System.nanoTime();
          Map<String, Object> redacted = Redactor.redact(form);
          long b = System.nanoTime();
          encoder.encode(redacted);
          t2 += b - a;
          t3 += System.nanoTime() - a;
        }
        if (r >= rounds / 2) {
          map += t1 - t0;
          redact += t2 - t1;
          encode += t3 - t2;
          n += forms.size();
        }
      }
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("mapNs", map / n);
    out.put("redactNs", redact / n);
    out.put("encodeNs", encode / n);
    return out;
  }

  /** Per-event cost: the same runs without and with the listener (best of 5 rounds each). */
  static Map<String, Object> bench(String bootstrap, String topic, int runs) throws Exception {
    List<AgentEvent> counted = new ArrayList<>();
    agent(new AgentEventPublisher(List.of(counted::add))).runStream(request("bench-count"), e -> {});
    int eventsPerRun = counted.size();
    RuntrailAgentListener runtrail =
        RuntrailAgentListener.builder().bootstrapServers(bootstrap).topic(topic).tenant("bench")
            .spoolDir(Files.createTempDirectory("ai4j-bench-spool")).build();
    AgentListener nothing = event -> {};
    long bare = Long.MAX_VALUE;
    long with = Long.MAX_VALUE;
    for (int round = 0; round < 6; round++) { // round 0 warms the JIT for both
      long t0 = System.nanoTime();
      for (int i = 0; i < runs; i++) {
        agent(new AgentEventPublisher(List.of(nothing))).runStream(request("bench-" + round + "-" + i), e -> {});
      }
      long t1 = System.nanoTime();
      for (int i = 0; i < runs; i++) {
        agent(new AgentEventPublisher(List.of(runtrail))).runStream(request("bench-" + round + "-" + i), e -> {});
      }
      long t2 = System.nanoTime();
      if (round > 0) {
        bare = Math.min(bare, t1 - t0);
        with = Math.min(with, t2 - t1);
      }
    }
    boolean flushed = runtrail.flush(Duration.ofSeconds(120));
    Map<String, Object> stats = runtrail.stats();
    runtrail.close();
    long events = (long) runs * eventsPerRun;
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("runs", runs);
    out.put("eventsPerRun", eventsPerRun);
    out.put("bareNsPerEvent", bare / events);
    out.put("withListenerNsPerEvent", with / events);
    out.put("overheadNsPerEvent", (with - bare) / events);
    out.put("ratio", (double) with / bare);
    out.put("flushed", flushed);
    out.put("stats", stats);
    return out;
  }

  static AgentRequest request(String runId) {
    Map<String, Object> metadata = new LinkedHashMap<>();
    metadata.put(AgentRequest.METADATA_KEY_RUN_ID, runId);
    metadata.put(AgentRequest.METADATA_KEY_TURN_ID, "turn-1");
    metadata.put(AgentRequest.METADATA_KEY_SESSION_ID, "sess-" + runId);
    String secret = System.getenv("AI4J_DRIVER_SECRET");
    String text = "weather in Paris? my api_key=sk-live-0123456789abcdefXYZ";
    return new AgentRequest(secret == null ? text : text + " " + secret + "-" + runId, metadata);
  }

  static Agent agent(AgentEventPublisher publisher) {
    return agent(publisher, false);
  }

  static Agent agent(AgentEventPublisher publisher, boolean fails) {
    return Agents.react()
        .model("gpt-4o-mini")
        .instructions("answer briefly")
        .temperature(0.2)
        .options(AgentOptions.builder().stream(true).build())
        .modelClient(fails ? new FailingModel() : new ScriptedModel())
        .toolRegistry(new StaticToolRegistry(List.of(weatherTool())))
        .toolExecutor(call -> {
          if ("fail".equals(call.getName())) {
            throw new IllegalStateException("tool exploded");
          }
          return "{\"tempC\":21}";
        })
        .codeExecutor(request -> {
          throw new UnsupportedOperationException("the ReAct runtime runs no code");
        })
        .eventPublisher(publisher)
        .build();
  }

  static Map<String, Object> weatherTool() {
    Map<String, Object> fn = new LinkedHashMap<>();
    fn.put("name", "weather");
    fn.put("description", "current weather");
    fn.put("parameters", Map.of("type", "object", "properties", Map.of("city", Map.of("type", "string"))));
    Map<String, Object> tool = new LinkedHashMap<>();
    tool.put("type", "function");
    tool.put("function", fn);
    return tool;
  }

  /** A model whose stream fails on its first call, as a provider outage would. */
  static final class FailingModel implements AgentModelClient {
    @Override
    public AgentModelResult create(AgentPrompt prompt) {
      throw new IllegalStateException("model exploded: 503 Service Unavailable");
    }

    @Override
    public AgentModelResult createStream(AgentPrompt prompt, AgentModelStreamListener listener) {
      listener.onDeltaText("Let me ");
      IllegalStateException exc = new IllegalStateException("model exploded: 503 Service Unavailable");
      listener.onError(exc);
      throw exc;
    }
  }

  /** D2's scripted model (tests/ai4j): retry, reasoning, deltas, two tool calls, then an answer. */
  static final class ScriptedModel implements AgentModelClient {
    private int calls;

    @Override
    public AgentModelResult create(AgentPrompt prompt) {
      throw new UnsupportedOperationException("the driver runs streaming");
    }

    @Override
    public AgentModelResult createStream(AgentPrompt prompt, AgentModelStreamListener listener) {
      calls++;
      if (calls == 1) {
        listener.onRetry("rate limited", 1, 3, new RuntimeException("429 Too Many Requests"));
        listener.onReasoningDelta("look up");
        listener.onReasoningDelta(" the weather");
        listener.onDeltaText("Let me ");
        listener.onDeltaText("check.");
        AgentToolCall call = AgentToolCall.builder().name("weather").callId("call_1")
            .arguments("{\"city\":\"Paris\",\"token\":\"ghp_abcdefghijklmnopqrstuvwx\"}").type("function").build();
        AgentToolCall bad = AgentToolCall.builder().name("fail").callId("call_2").arguments("{}").type("function").build();
        listener.onToolCall(call);
        listener.onToolCall(bad);
        Map<String, Object> raw = new LinkedHashMap<>();
        raw.put("id", "resp_1");
        raw.put("usage", Map.of("prompt_tokens", 12, "completion_tokens", 5));
        return AgentModelResult.builder().reasoningText("look up the weather").outputText("Let me check.")
            .toolCalls(List.of(call, bad)).rawResponse(raw).inputTokens(12L).outputTokens(5L).build();
      }
      listener.onDeltaText("It is 21C.");
      Map<String, Object> raw = new LinkedHashMap<>();
      raw.put("id", "resp_2");
      raw.put("usage", Map.of("prompt_tokens", 30, "completion_tokens", 4));
      return AgentModelResult.builder().outputText("It is 21C.").rawResponse(raw).build();
    }
  }
}
