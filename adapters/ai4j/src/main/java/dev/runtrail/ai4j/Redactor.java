package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONException;
import com.alibaba.fastjson2.JSONReader;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Secrets masked before an event leaves the agent's process: a port of
 * {@code runtrail.publisher.redaction.default_redactor} (the Python Publisher's redactor). The
 * history is append-only, so a secret that reaches Kafka can never be purged. Shared vectors
 * ({@code tests/redaction_vectors.json}) run through both implementations.
 *
 * <p>Values under secret-bearing key names, secret-shaped text inside any string (JSON text in
 * strings is parsed and walked), and the envelope's free text ({@code correlationId},
 * {@code actor.id}) are masked. Identifier fields holding a secret-shaped value refuse the event
 * ({@link SecretInIdentifier}): masking them would merge unrelated runs.
 */
public final class Redactor {
  private Redactor() {}

  public static final String REDACTED = SecretText.REDACTED;
  static final String[] IDENTIFIER_FIELDS = {"eventId", "runId", "tenantId", "causationEventId", "sessionId", "turnId"};

  /** An envelope identifier holds a secret-shaped value; the event is refused, not masked. */
  public static final class SecretInIdentifier extends RuntimeException {
    SecretInIdentifier(String message) {
      super(message);
    }
  }

  private static String jsonText(String text) {
    String stripped = text.stripLeading();
    if (!(stripped.startsWith("{") || stripped.startsWith("["))) {
      return null;
    }
    Object parsed;
    try {
      parsed = JSON.parse(text, JSONReader.Feature.UseBigDecimalForDoubles);
    } catch (JSONException | NumberFormatException exc) {
      return null;
    }
    if (!(parsed instanceof Map || parsed instanceof List)) {
      return null;
    }
    Object redacted = redactValue(parsed);
    return redacted.equals(parsed) ? text : JSON.toJSONString(redacted);
  }

  /** {@code text} with every secret shape masked. */
  public static String redactText(String text) {
    if (!SecretMarkers.hasMarker(text)) {
      return text;
    }
    String asJson = jsonText(text);
    return asJson != null ? asJson : SecretText.maskText(text);
  }

  /** A redacted copy of a JSON value; unchanged sub-trees are shared, never mutated. */
  public static Object redactValue(Object value) {
    if (value instanceof String) {
      return redactText((String) value);
    }
    if (value instanceof Map) {
      Map<Object, Object> out = new LinkedHashMap<>();
      for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
        Object key = e.getKey();
        out.put(key, key instanceof String && SecretKeys.isSensitiveKey((String) key) ? REDACTED : redactValue(e.getValue()));
      }
      return out;
    }
    if (value instanceof List) {
      List<Object> out = new ArrayList<>();
      for (Object item : (List<?>) value) {
        out.add(redactValue(item));
      }
      return out;
    }
    return value;
  }

  /** Redact {@code data} and the envelope's free text; refuse secret-shaped identifiers. */
  @SuppressWarnings("unchecked")
  public static Map<String, Object> redact(Map<String, Object> form) {
    if (!SecretMarkers.hasMarker(JSON.toJSONString(form, com.alibaba.fastjson2.JSONWriter.Feature.WriteMapNullValue))) {
      return form; // the common case: one scan of the event's JSON text, no walk
    }
    for (String name : IDENTIFIER_FIELDS) {
      Object value = form.get(name);
      if (value instanceof String && !redactText((String) value).equals(value)) {
        throw new SecretInIdentifier(
            "envelope field " + name + " holds a secret-shaped value; identifiers are never "
                + "masked (consumers key on them), so the event is refused");
      }
    }
    Map<String, Object> out = new LinkedHashMap<>(form);
    if (form.get("correlationId") instanceof String) {
      out.put("correlationId", redactText((String) form.get("correlationId")));
    }
    if (form.get("actor") instanceof Map) {
      Map<String, Object> actor = new LinkedHashMap<>((Map<String, Object>) form.get("actor"));
      if (actor.get("id") instanceof String) {
        actor.put("id", redactText((String) actor.get("id")));
      }
      out.put("actor", actor);
    }
    if (out.containsKey("data")) {
      out.put("data", redactValue(out.get("data")));
    }
    return out;
  }
}
