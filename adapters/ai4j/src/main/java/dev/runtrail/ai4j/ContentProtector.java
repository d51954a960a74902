package dev.runtrail.ai4j;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * Protected fields of an event replaced by references before encoding, by the rules of the
 * Python publisher's {@code runtrail.privacy.protect.ContentProtector}: a field goes by
 * reference when its class is in the tenant's policy, when its JSON form is larger than the
 * claim-check size (whatever the policy), or when it is text that would read as a reference.
 * The content is sealed (AES-256-GCM) with the data key of its subject and appended to the
 * content store under the sha256 of the ciphertext; the field then holds
 * {@code rtref:1:<store>:<keyId>:<size>:<digest>}, which the Python readers resolve.
 *
 * <p>Runs after redaction and before encoding, so what is spooled and sent holds references
 * only. A store that fails refuses the event ({@link ProtectFailed}): the content the policy
 * keeps out of the event never travels inline as a fallback.
 */
final class ContentProtector implements AutoCloseable {
  static final String PREFIX = "rtref:1:";
  private static final Pattern REFERENCE = Pattern.compile(
      "rtref:1:[a-z0-9][a-z0-9_-]{0,62}:dk-[0-9a-f]{32}:[0-9]{1,15}:[0-9a-f]{64}");

  /** The content could not be stored; the event must not be sent. */
  static final class ProtectFailed extends RuntimeException {
    ProtectFailed(String message, Throwable cause) {
      super(message, cause);
    }
  }

  private final FileContentStore content;
  private final FileKeyStore keys;
  private final PrivacyPolicy policy;
  /** A string this short cannot exceed the claim check (6 JSON bytes a char at most: \\uXXXX). */
  private final long shortText;

  ContentProtector(FileContentStore content, FileKeyStore keys, PrivacyPolicy policy) {
    this.content = content;
    this.keys = keys;
    this.policy = policy;
    this.shortText = policy.claimCheckBytes() / 6;
  }

  /**
   * The protector the Python settings describe, or null without a content store (then
   * publishing does not change). The key store defaults to {@code <stateDir>/keys}, as
   * {@code runtrail.privacy.protect.vault_from_settings}.
   */
  static ContentProtector open(String contentStoreUrl, String keyStoreUrl, String policyJson, Path stateDir)
      throws IOException {
    if (contentStoreUrl == null || contentStoreUrl.isEmpty()) {
      return null;
    }
    PrivacyPolicy policy = PrivacyPolicy.parse(policyJson);
    FileContentStore content = FileContentStore.fromUrl(contentStoreUrl);
    FileKeyStore keys = keyStoreUrl == null || keyStoreUrl.isEmpty()
        ? new FileKeyStore(stateDir.resolve("keys").toAbsolutePath().normalize(), false)
        : FileKeyStore.fromUrl(keyStoreUrl);
    return new ContentProtector(content, keys, policy);
  }

  /** {@code form} with its protected fields as references (the form itself when none is). */
  Map<String, Object> protect(Map<String, Object> form) {
    Map<String, PrivacyPolicy.FieldClass> fields = PrivacyPolicy.CONTENT_FIELDS.get(form.get("type"));
    Object data = form.get("data");
    if (fields == null || !(data instanceof Map)) {
      return form;
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> given = (Map<String, Object>) data;
    String tenant = String.valueOf(form.get("tenantId"));
    java.util.Set<PrivacyPolicy.FieldClass> wanted = policy.forTenant(tenant).byReference();
    Map<String, Object> replaced = new LinkedHashMap<>();
    for (Map.Entry<String, PrivacyPolicy.FieldClass> field : fields.entrySet()) {
      Object value = given.get(field.getKey());
      if (value == null || isReference(value)) {
        continue;
      }
      byte[] encoded = null;
      if (!wanted.contains(field.getValue()) && !looksLikeReference(value)) {
        if (value instanceof String && ((String) value).length() <= shortText) {
          continue;
        }
        encoded = json(value);
        if (encoded.length <= policy.claimCheckBytes()) {
          continue;
        }
      }
      try {
        replaced.put(field.getKey(), put(tenant, policy.subjectOf(form), encoded != null ? encoded : json(value)));
      } catch (IOException | RuntimeException exc) {
        throw new ProtectFailed("cannot store " + form.get("type") + " " + field.getKey()
            + " in the content store: " + exc.getClass().getSimpleName() + ": " + exc.getMessage(), exc);
      }
    }
    if (replaced.isEmpty()) {
      return form;
    }
    Map<String, Object> newData = new LinkedHashMap<>(given);
    newData.putAll(replaced);
    Map<String, Object> out = new LinkedHashMap<>(form);
    out.put("data", newData);
    return out;
  }

  /** Seal a JSON value's bytes for the subject and store them; the reference. */
  String put(String tenant, String subject, byte[] encoded) throws IOException {
    FileKeyStore.DataKey key = keys.dataKey(tenant, subject);
    byte[] blob = Sealing.seal(key.secret(), encoded, Sealing.associated(tenant, key.keyId()));
    String digest = Sealing.sha256Hex(blob);
    content.put(tenant, key.keyId(), digest, blob);
    return PREFIX + content.name() + ":" + key.keyId() + ":" + encoded.length + ":" + digest;
  }

  private static byte[] json(Object value) {
    return JsonText.dump(value).getBytes(StandardCharsets.UTF_8);
  }

  static boolean isReference(Object value) {
    return value instanceof String && ((String) value).startsWith(PREFIX) && REFERENCE.matcher((String) value).matches();
  }

  /** Whether plain content would be mistaken for a reference (it must then go by one). */
  static boolean looksLikeReference(Object value) {
    return value instanceof String && ((String) value).startsWith(PREFIX);
  }

  @Override
  public void close() throws IOException {
    content.close();
  }
}
