package dev.runtrail.ai4j;

import io.github.lnyocly.ai4j.agent.event.AgentEvent;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * An ai4j {@link AgentEvent} as a complete runtrail JSON-form event, the Java twin of
 * {@code runtrail.events.ai4j} plus the publisher's envelope defaults
 * ({@code runtrail.publisher.envelope_defaults}, {@code sequencing}).
 *
 * <p>Where ai4j's values go (AI4J_FINDINGS.md lists what the runtime emits): MODEL_REQUEST
 * {@code {prompt: payload}}; MODEL_RESPONSE {@code {message, raw: payload}}; MODEL_REASONING
 * {@code {text: message}} (or the payload when it is the text); MODEL_RETRY the payload map;
 * TOOL_CALL / TOOL_RESULT the payload with ai4j's {@code name} as {@code toolName}; STEP_END
 * {@code {reason: message}}. Other ai4j types are not runtrail types: {@link #map} returns null.
 */
public final class EventMapper {
  /** runtrail's runtime event types at their current schema versions (a test checks Python's). */
  public static final Map<String, Integer> CURRENT_VERSIONS =
      Map.of(
          "MODEL_REQUEST", 1,
          "MODEL_RESPONSE", 1,
          "MODEL_REASONING", 1,
          "MODEL_RETRY", 2,
          "TOOL_CALL", 2,
          "TOOL_RESULT", 2,
          "STEP_END", 1);

  private static final DateTimeFormatter MILLIS =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

  private final String tenant;
  private final String actorId;
  private final Map<String, AtomicLong> nextSequence = new ConcurrentHashMap<>();

  /** Thrown for an event runtrail cannot take (no run ID, a payload of the wrong shape…). */
  public static final class Refused extends RuntimeException {
    Refused(String message) {
      super(message);
    }
  }

  public EventMapper(String tenant, String actorId) {
    if (tenant == null || tenant.isBlank()) {
      throw new IllegalArgumentException("tenant must not be blank");
    }
    this.tenant = tenant;
    this.actorId = actorId == null || actorId.isBlank() ? "runtrail-ai4j" : actorId;
  }

  public String tenant() {
    return tenant;
  }

  /**
   * Continue {@code runId} at {@code next} (a run resumed in a new process); sequences start at
   * 1 per (tenant, run), as the Python publisher numbers them.
   */
  public void setNextSequence(String runId, long next) {
    if (next < 1) {
      throw new IllegalArgumentException("sequences start at 1");
    }
    nextSequence.computeIfAbsent(runId, k -> new AtomicLong()).set(next - 1);
  }

  /** Drop a finished run's counter (a long-lived agent would otherwise keep them all). */
  public void forget(String runId) {
    nextSequence.remove(runId);
  }

  /** The runtrail event of {@code event}, or null when its type is not a runtrail type. */
  public Map<String, Object> map(AgentEvent event) {
    String type = event.getType() == null ? null : event.getType().name();
    Integer version = type == null ? null : CURRENT_VERSIONS.get(type);
    if (version == null) {
      return null;
    }
    String runId = event.getRunId();
    if (runId == null || runId.isBlank()) {
      throw new Refused(type + " without a run ID: runtrail keys every event by its run");
    }
    Map<String, Object> data = data(type, event.getMessage(), event.getPayload());
    Map<String, Object> form = new LinkedHashMap<>();
    String eventId = event.getEventId();
    form.put("eventId", eventId == null || eventId.isBlank() ? UUID.randomUUID().toString() : eventId);
    form.put("runId", runId);
    form.put("tenantId", tenant);
    long sequence = nextSequence.computeIfAbsent(runId, k -> new AtomicLong()).incrementAndGet();
    form.put("sequence", Long.toString(sequence));
    form.put("type", type);
    form.put("schemaVersion", version);
    form.put("occurredAt", MILLIS.format(Instant.now()));
    form.put("recordedAt", null);
    Map<String, Object> actor = new LinkedHashMap<>();
    actor.put("kind", "agent");
    actor.put("id", actorId);
    form.put("actor", actor);
    form.put("causationEventId", null);
    form.put("correlationId", runId);
    form.put("sessionId", event.getSessionId());
    form.put("turnId", event.getTurnId());
    form.put("step", event.getStep() == null ? null : event.getStep().longValue());
    form.put("data", data);
    return form;
  }

  /** The runtrail {@code data} of one ai4j event of a runtime type. */
  static Map<String, Object> data(String type, String message, Object payload) {
    Map<String, Object> data = new LinkedHashMap<>();
    switch (type) {
      case "MODEL_REQUEST":
        Object prompt = JsonText.plain(payload);
        if (prompt instanceof Map && ((Map<?, ?>) prompt).keySet().equals(java.util.Set.of("prompt"))) {
          return copy((Map<?, ?>) prompt); // runtrail's own {prompt} form
        }
        data.put("prompt", prompt);
        return data;
      case "MODEL_RESPONSE":
        data.put("message", message);
        data.put("raw", JsonText.plain(payload));
        return data;
      case "MODEL_REASONING":
        String text = (message == null || message.isEmpty()) && payload instanceof String ? (String) payload : message;
        if (text == null) {
          throw new Refused("MODEL_REASONING without text (neither a message nor a String payload)");
        }
        data.put("text", text);
        return data;
      case "STEP_END":
        data.put("reason", message);
        return data;
      case "MODEL_RETRY":
        Map<String, Object> retry = payloadMap(type, payload);
        Object attempt = retry.get("attempt");
        if (!(attempt instanceof Number) || ((Number) attempt).longValue() < 1) {
          throw new Refused("MODEL_RETRY: attempt must be an integer >= 1, not " + attempt);
        }
        return retry;
      case "TOOL_CALL":
      case "TOOL_RESULT":
        Map<String, Object> tool = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : payloadMap(type, payload).entrySet()) {
          String key = e.getKey().equals("name") || e.getKey().equals("tool_name") ? "toolName" : e.getKey();
          if (tool.containsKey(key)) {
            throw new Refused(type + ": both " + key + " and ai4j's spelling of it");
          }
          tool.put(key, e.getValue());
        }
        if (type.equals("TOOL_RESULT") && Boolean.FALSE.equals(tool.get("failed"))
            && (Boolean.FALSE.equals(tool.get("ok"))
                || (tool.get("error") instanceof String && !((String) tool.get("error")).isBlank()))) {
          throw new Refused("TOOL_RESULT: failed is false but ok is false or error is set");
        }
        return tool;
      default:
        throw new Refused("not a runtrail runtime type: " + type);
    }
  }

  private static Map<String, Object> payloadMap(String type, Object payload) {
    Object plain = JsonText.plain(payload);
    if (plain == null) {
      return new LinkedHashMap<>();
    }
    if (!(plain instanceof Map)) {
      throw new Refused(type + ": the payload must be an object, not " + plain.getClass().getSimpleName());
    }
    return copy((Map<?, ?>) plain);
  }

  private static Map<String, Object> copy(Map<?, ?> map) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<?, ?> e : map.entrySet()) {
      out.put(String.valueOf(e.getKey()), e.getValue());
    }
    return out;
  }
}
