package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONObject;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * What goes by reference, read from the JSON the Python publisher reads
 * ({@code RUNTRAIL_PRIVACY_POLICY}; {@code runtrail.privacy.policy}):
 * {@code {"byReference": [classes] | "all", "subject": "run"|"session"|"actor",
 * "claimCheckBytes": n, "tenants": {tenant: {byReference, subject}}}}. A tenant's entry replaces
 * the default for that tenant; unknown keys, classes and subjects are refused by name.
 */
final class PrivacyPolicy {
  /** Content larger than this (its JSON form, in bytes) always goes by reference. */
  static final long DEFAULT_CLAIM_CHECK_BYTES = 1024 * 1024;
  private static final Set<String> KEYS = Set.of("byReference", "subject", "tenants", "claimCheckBytes");
  private static final List<String> SUBJECTS = List.of("run", "session", "actor");

  /** The field classes of {@code runtrail.privacy.field_classes.FieldClass}. */
  enum FieldClass {
    PROMPTS, OUTPUTS, REASONING, RAW_RESPONSES, TOOL_ARGUMENTS, TOOL_RESULTS, SESSION_SNAPSHOTS;

    String wire() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  /** Event type -> {data field -> its class}: the table of {@code CONTENT_FIELDS}. */
  static final Map<String, Map<String, FieldClass>> CONTENT_FIELDS = Map.of(
      "MODEL_REQUEST", Map.of("prompt", FieldClass.PROMPTS),
      "MODEL_RESPONSE", Map.of("message", FieldClass.OUTPUTS, "raw", FieldClass.RAW_RESPONSES),
      "MODEL_REASONING", Map.of("text", FieldClass.REASONING),
      "TOOL_CALL", Map.of("arguments", FieldClass.TOOL_ARGUMENTS),
      "TOOL_RESULT", Map.of("output", FieldClass.TOOL_RESULTS, "error", FieldClass.TOOL_RESULTS,
          "trace", FieldClass.TOOL_RESULTS),
      "run.input_required", Map.of("prompt", FieldClass.PROMPTS),
      "run.input_received", Map.of("input", FieldClass.PROMPTS),
      "session.snapshot", Map.of("memory", FieldClass.SESSION_SNAPSHOTS,
          "compactResults", FieldClass.SESSION_SNAPSHOTS));

  record TenantPolicy(Set<FieldClass> byReference, String subject) {}

  private final TenantPolicy fallback;
  private final Map<String, TenantPolicy> tenants;
  private final long claimCheckBytes;

  private PrivacyPolicy(TenantPolicy fallback, Map<String, TenantPolicy> tenants, long claimCheckBytes) {
    this.fallback = fallback;
    this.tenants = tenants;
    this.claimCheckBytes = claimCheckBytes;
  }

  /** The policy of a JSON text; null or blank is the empty policy (only the claim check). */
  static PrivacyPolicy parse(String json) {
    JSONObject value = json == null || json.isBlank() ? new JSONObject() : JSON.parseObject(json);
    Object given = value.get("tenants");
    if (given != null && !(given instanceof Map)) {
      throw new IllegalArgumentException("privacy policy: tenants is an object tenant -> policy");
    }
    long limit = value.containsKey("claimCheckBytes") ? value.getLongValue("claimCheckBytes") : DEFAULT_CLAIM_CHECK_BYTES;
    if (limit < 1) {
      throw new IllegalArgumentException("privacy policy: claimCheckBytes must be positive");
    }
    Map<String, TenantPolicy> tenants = new HashMap<>();
    if (given != null) {
      for (Map.Entry<?, ?> e : ((Map<?, ?>) given).entrySet()) {
        String where = "privacy policy of tenant '" + e.getKey() + "'";
        if (!(e.getValue() instanceof Map)) {
          throw new IllegalArgumentException(where + ": an object is required");
        }
        tenants.put(String.valueOf(e.getKey()), tenant((Map<?, ?>) e.getValue(), where));
      }
    }
    return new PrivacyPolicy(tenant(value, "privacy policy"), Map.copyOf(tenants), limit);
  }

  private static TenantPolicy tenant(Map<?, ?> value, String where) {
    Set<String> unknown = new TreeSet<>();
    for (Object key : value.keySet()) {
      if (!KEYS.contains(String.valueOf(key))) {
        unknown.add(String.valueOf(key));
      }
    }
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException(where + ": unknown privacy policy key(s) " + unknown);
    }
    Object classes = value.get("byReference");
    Set<FieldClass> chosen = EnumSet.noneOf(FieldClass.class);
    if ("all".equals(classes)) {
      chosen = EnumSet.allOf(FieldClass.class);
    } else if (classes instanceof List) {
      for (Object name : (List<?>) classes) {
        chosen.add(fieldClass(String.valueOf(name), where));
      }
    } else if (classes != null) {
      throw new IllegalArgumentException(where + ": byReference is a list of field classes or \"all\"");
    }
    Object subject = value.get("subject") == null ? "run" : value.get("subject");
    if (!SUBJECTS.contains(subject)) {
      throw new IllegalArgumentException(where + ": subject is one of run, session, actor, not '" + subject + "'");
    }
    return new TenantPolicy(Set.copyOf(chosen), (String) subject);
  }

  private static FieldClass fieldClass(String name, String where) {
    for (FieldClass c : FieldClass.values()) {
      if (c.wire().equals(name)) {
        return c;
      }
    }
    List<String> known = java.util.Arrays.stream(FieldClass.values()).map(FieldClass::wire).toList();
    throw new IllegalArgumentException(where + ": '" + name + "' is not a valid FieldClass (known classes: "
        + String.join(", ", known) + ", or all)");
  }

  TenantPolicy forTenant(String tenant) {
    return tenants.getOrDefault(tenant, fallback);
  }

  long claimCheckBytes() {
    return claimCheckBytes;
  }

  /** The data subject of an event's JSON form, as its tenant's policy names it. */
  String subjectOf(Map<String, Object> form) {
    String runId = String.valueOf(form.get("runId"));
    String chosen = forTenant(String.valueOf(form.get("tenantId"))).subject();
    if (chosen.equals("session")) {
      Object session = form.get("sessionId");
      return session == null || String.valueOf(session).isEmpty() ? runId : String.valueOf(session);
    }
    if (chosen.equals("actor")) {
      Object actor = form.get("actor");
      Object found = actor instanceof Map ? ((Map<?, ?>) actor).get("id") : null;
      return found == null || String.valueOf(found).isEmpty() ? runId : String.valueOf(found);
    }
    return runId;
  }
}
