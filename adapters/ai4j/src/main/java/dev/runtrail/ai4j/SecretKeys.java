package dev.runtrail.ai4j;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

/**
 * Which key names hold secrets: a port of {@code runtrail.publisher.secret_keys} (same words,
 * same rule), so a key masked by the Python Publisher is masked here too.
 */
final class SecretKeys {
  private SecretKeys() {}

  static final String[] SECRET_SUFFIXES = {
    "password", "passwd", "passphrase", "pwd", "secret", "token", "cookie", "auth",
    "authorization", "credential", "credentials", "apikey", "privatekey", "secretkey", "accesskey",
  };
  static final Set<String> KEY_QUALIFIERS =
      Set.of("access", "account", "api", "auth", "client", "encryption", "hmac", "license",
          "master", "private", "secret", "session", "signing", "ssh", "subscription");
  static final Set<String> SECRET_ANYWHERE = Set.of("password", "passwd", "passphrase");

  private static final Pattern CAMEL = Pattern.compile("(?<=[a-z0-9])(?=[A-Z])");
  private static final Pattern SEPARATORS = Pattern.compile("[-_. ]+");
  private static final int CACHE_MAX = 4096;
  private static final Map<String, Boolean> CACHE = new ConcurrentHashMap<>();

  private static List<String> words(String text) {
    List<String> out = new ArrayList<>();
    for (String w : SEPARATORS.split(text, -1)) {
      if (!w.isEmpty()) {
        out.add(w);
      }
    }
    return out;
  }

  private static boolean secretWords(List<String> words) {
    if (words.isEmpty()) {
      return false;
    }
    String last = words.get(words.size() - 1);
    for (String suffix : SECRET_SUFFIXES) {
      if (last.endsWith(suffix)) {
        return true;
      }
    }
    if (last.equals("key") && words.size() > 1 && KEY_QUALIFIERS.contains(words.get(words.size() - 2))) {
      return true;
    }
    for (String w : words) {
      if (SECRET_ANYWHERE.contains(w)) {
        return true;
      }
    }
    return false;
  }

  /** Whether values under {@code key} are secrets (any case, camelCase, -, _, .). */
  static boolean isSensitiveKey(String key) {
    Boolean known = CACHE.get(key);
    if (known != null) {
      return known;
    }
    List<String> plain = words(key.toLowerCase(Locale.ROOT));
    List<String> camel = words(CAMEL.matcher(key).replaceAll("_").toLowerCase(Locale.ROOT));
    boolean result = secretWords(plain) || secretWords(camel);
    if (CACHE.size() < CACHE_MAX) {
      CACHE.put(key, result);
    }
    return result;
  }
}
