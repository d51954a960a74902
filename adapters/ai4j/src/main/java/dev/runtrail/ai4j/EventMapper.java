package dev.runtrail.ai4j;

import io.github.lnyocly.ai4j.agent.event.AgentEvent;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
 *
 * <p>The run's lifecycle, so the projector's status is right (the rules of the Python adapters):
 * before a run's first event, {@code run.accepted} and {@code run.state_transitioned} (received
 * to executing); ai4j's FINAL_OUTPUT is {@code run.succeeded}, its ERROR {@code run.failed}
 * (reason = the error's message). One terminal event per run: a later FINAL_OUTPUT or ERROR of
 * an ended run maps to nothing ({@link #map} returns null; the listener counts it as skipped).
 * ai4j's ReAct runtime sends FINAL_OUTPUT <em>inside</em> the last step (STEP_END follows), and
 * the projector rejects anything after a terminal event: so while a step is open (a STEP_START
 * without its STEP_END), run.succeeded waits for that STEP_END and follows it;
 * {@link #endPending} releases what still waits (the listener's close). ERROR is published at
 * once: ai4j ends the run by throwing, nothing of the run follows it. ai4j's non-streaming
 * {@code Agent.run} throws a failed model call without an ERROR event: {@link #failRun} ends
 * such a run (the listener's {@code runFailed}, called from the agent's catch).
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

  /** runtrail's run-lifecycle (domain) types the mapper writes, at their current versions. */
  public static final Map<String, Integer> LIFECYCLE_VERSIONS =
      Map.of(
          "run.accepted", 1,
          "run.state_transitioned", 1,
          "run.succeeded", 1,
          "run.failed", 1);

  /** Every type this adapter publishes (what its encoder loads). */
  public static final Map<String, Integer> PUBLISHED_VERSIONS = published();

  /** run.failed's reason is bounded like the Python adapters' (500 characters). */
  static final int MAX_REASON = 500;

  private static Map<String, Integer> published() {
    Map<String, Integer> all = new HashMap<>(CURRENT_VERSIONS);
    all.putAll(LIFECYCLE_VERSIONS);
    return Map.copyOf(all);
  }

  /** Where a run is in its lifecycle: absent = not seen, OPEN = accepted, ENDED = terminal. */
  private enum Phase { OPEN, ENDED }

  private static final DateTimeFormatter MILLIS =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

  private final String tenant;
  private final String actorId;
  private final String policyVersion;
  private final Map<String, AtomicLong> nextSequence = new ConcurrentHashMap<>();
  private final Map<String, Phase> phases = new ConcurrentHashMap<>();
  private final Map<String, Boolean> stepOpen = new ConcurrentHashMap<>();
  private final Map<String, AgentEvent> pendingSuccess = new ConcurrentHashMap<>();
  /** The last event of each open run: its session, turn and step, for {@link #failRun}. */
  private final Map<String, AgentEvent> lastEvent = new ConcurrentHashMap<>();

  /** Thrown for an event runtrail cannot take (no run ID, a payload of the wrong shape…). */
  public static final class Refused extends RuntimeException {
    Refused(String message) {
      super(message);
    }
  }

  public EventMapper(String tenant, String actorId) {
    this(tenant, actorId, "ai4j");
  }

  /** {@code policyVersion} goes into each run's run.accepted (runtrail requires one). */
  public EventMapper(String tenant, String actorId, String policyVersion) {
    if (tenant == null || tenant.isBlank()) {
      throw new IllegalArgumentException("tenant must not be blank");
    }
    this.tenant = tenant;
    this.actorId = actorId == null || actorId.isBlank() ? "runtrail-ai4j" : actorId;
    this.policyVersion = policyVersion == null || policyVersion.isBlank() ? "ai4j" : policyVersion;
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

  /**
   * Drop a finished run's counter and lifecycle (a long-lived agent would otherwise keep them
   * all); a later event of that run opens it again, as a new run would.
   */
  public void forget(String runId) {
    nextSequence.remove(runId);
    phases.remove(runId);
    stepOpen.remove(runId);
    pendingSuccess.remove(runId);
    lastEvent.remove(runId);
  }

  /** The run.succeeded events still waiting for their step's end (released now, in no order). */
  public List<Map<String, Object>> endPending() {
    List<Map<String, Object>> out = new ArrayList<>();
    for (String runId : List.copyOf(pendingSuccess.keySet())) {
      AgentEvent event = pendingSuccess.remove(runId);
      if (event != null) {
        out.add(succeeded(event, runId));
      }
    }
    return out;
  }

  /**
   * run.failed for a run whose runtime threw without an ERROR event (ai4j's non-streaming
   * {@code Agent.run} does so when the model fails): null when the run already ended or was
   * never seen (nothing of it was published, so there is no run to end).
   */
  public List<Map<String, Object>> failRun(String runId, Throwable error) {
    if (runId == null || phases.get(runId) != Phase.OPEN) {
      return null;
    }
    phases.put(runId, Phase.ENDED);
    pendingSuccess.remove(runId);
    AgentEvent last = lastEvent.remove(runId);
    AgentEvent event = new AgentEvent();
    event.setRunId(runId);
    event.setType(io.github.lnyocly.ai4j.agent.event.AgentEventType.ERROR);
    if (last != null) {
      event.setSessionId(last.getSessionId());
      event.setTurnId(last.getTurnId());
      event.setStep(last.getStep());
    }
    List<Map<String, Object>> out = new ArrayList<>(1);
    out.add(envelope(event, runId, "run.failed", LIFECYCLE_VERSIONS.get("run.failed"),
        failure(error == null ? null : error.getMessage(), error), true));
    return out;
  }

  private static Map<String, Object> failure(String message, Object payload) {
    String reason = message;
    if ((reason == null || reason.isBlank()) && payload instanceof Throwable) {
      reason = payload.getClass().getName();
    }
    reason = reason == null || reason.isBlank() ? "ai4j reported an ERROR without a message" : reason;
    Map<String, Object> data = new LinkedHashMap<>();
    data.put("reason", reason.length() > MAX_REASON ? reason.substring(0, MAX_REASON) : reason);
    return data;
  }

  private Map<String, Object> succeeded(AgentEvent event, String runId) {
    Map<String, Object> data = new LinkedHashMap<>();
    data.put("resultRef", null); // the final text is in the run's events, not a stored artifact
    return envelope(event, runId, "run.succeeded", LIFECYCLE_VERSIONS.get("run.succeeded"), data);
  }

  /**
   * The runtrail events of {@code event}, in order: its runtime event, preceded by the run's
   * opening events when it is the run's first, or the run's terminal event for FINAL_OUTPUT /
   * ERROR. Null when its type is not a runtrail type or it is a second terminal; empty when
   * run.succeeded is held for the step's STEP_END.
   */
  public List<Map<String, Object>> map(AgentEvent event) {
    String type = event.getType() == null ? null : event.getType().name();
    String terminal = "FINAL_OUTPUT".equals(type) ? "run.succeeded" : "ERROR".equals(type) ? "run.failed" : null;
    Integer version = type == null ? null : CURRENT_VERSIONS.get(type);
    if ("STEP_START".equals(type) && event.getRunId() != null) {
      stepOpen.put(event.getRunId(), true); // not a runtrail type; it only holds run.succeeded back
    }
    if (version == null && terminal == null) {
      return null;
    }
    String runId = event.getRunId();
    if (runId == null || runId.isBlank()) {
      throw new Refused(type + " without a run ID: runtrail keys every event by its run");
    }
    List<Map<String, Object>> out = new ArrayList<>(3);
    if (terminal != null) {
      if (phases.get(runId) == Phase.ENDED) {
        return null; // one terminal event per run
      }
      open(event, runId, out);
      phases.put(runId, Phase.ENDED);
      lastEvent.remove(runId);
      if (terminal.equals("run.succeeded")) {
        if (stepOpen.containsKey(runId)) {
          pendingSuccess.put(runId, event); // follows the step's STEP_END
        } else {
          out.add(succeeded(event, runId));
        }
        return out;
      }
      Map<String, Object> data = failure(event.getMessage(), event.getPayload());
      out.add(envelope(event, runId, terminal, LIFECYCLE_VERSIONS.get(terminal), data));
      return out;
    }
    Map<String, Object> data = data(type, event.getMessage(), event.getPayload());
    open(event, runId, out);
    out.add(envelope(event, runId, type, version, data));
    if (phases.get(runId) == Phase.OPEN) {
      lastEvent.put(runId, event);
    }
    if (type.equals("STEP_END")) {
      stepOpen.remove(runId);
      AgentEvent success = pendingSuccess.remove(runId);
      if (success != null) {
        out.add(succeeded(success, runId));
      }
    }
    return out;
  }

  /** run.accepted + run.state_transitioned before a run's first event (nothing after that). */
  private void open(AgentEvent event, String runId, List<Map<String, Object>> out) {
    if (phases.putIfAbsent(runId, Phase.OPEN) != null) {
      return;
    }
    Map<String, Object> accepted = new LinkedHashMap<>();
    accepted.put("goalRef", "ai4j:" + runId);
    accepted.put("policyVersion", policyVersion);
    out.add(envelope(event, runId, "run.accepted", 1, accepted, true));
    Map<String, Object> moved = new LinkedHashMap<>();
    moved.put("fromStatus", "received");
    moved.put("toStatus", "executing");
    moved.put("reason", "ai4j run started");
    out.add(envelope(event, runId, "run.state_transitioned", 1, moved, true));
  }

  private Map<String, Object> envelope(
      AgentEvent event, String runId, String type, int version, Map<String, Object> data) {
    return envelope(event, runId, type, version, data, false);
  }

  /** The event's envelope; {@code derived}: an event of ours, not ai4j's (own eventId). */
  private Map<String, Object> envelope(
      AgentEvent event, String runId, String type, int version, Map<String, Object> data, boolean derived) {
    Map<String, Object> form = new LinkedHashMap<>();
    String eventId = derived ? null : event.getEventId();
    form.put("eventId", eventId == null || eventId.isBlank() ? EventIds.next() : eventId);
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
