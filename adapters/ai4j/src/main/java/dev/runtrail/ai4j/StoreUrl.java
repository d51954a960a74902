package dev.runtrail.ai4j;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * A content-store or key-store URL as the Python settings give it
 * ({@code RUNTRAIL_CONTENT_STORE_URL}, {@code RUNTRAIL_KEY_STORE_URL}). The adapter writes the
 * embedded {@code file://} stores only; any other scheme is refused by name when the listener
 * is built, never discovered at the first event.
 */
record StoreUrl(Path folder, Map<String, String> options) {
  private static final Set<String> TRUE = Set.of("1", "true", "yes", "on");
  private static final Set<String> FALSE = Set.of("0", "false", "no", "off");

  /** {@code file:///abs/dir?opt=v} (or {@code file://relative/dir}) as folder and options. */
  static StoreUrl parse(String url, String what) {
    URI uri;
    try {
      uri = new URI(url);
    } catch (java.net.URISyntaxException exc) {
      throw new IllegalArgumentException(what + ": not a URL: " + exc.getMessage());
    }
    String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(java.util.Locale.ROOT);
    if (!scheme.equals("file")) {
      throw new IllegalArgumentException(what + ": the ai4j adapter supports file:// only, not "
          + (scheme.isEmpty() ? "a URL without a scheme" : scheme + "://")
          + " (publish through the Python publisher for other stores)");
    }
    String host = uri.getRawAuthority();
    String netloc = host == null || host.equals("localhost") ? "" : decode(host);
    Map<String, String> options = new LinkedHashMap<>();
    String query = uri.getRawQuery();
    if (query != null && !query.isEmpty()) {
      for (String pair : query.split("&")) {
        int eq = pair.indexOf('=');
        options.put(decodeQuery(eq < 0 ? pair : pair.substring(0, eq)), eq < 0 ? "" : decodeQuery(pair.substring(eq + 1)));
      }
    }
    return new StoreUrl(Path.of(netloc + (uri.getRawPath() == null ? "" : decode(uri.getRawPath()))), options);
  }

  /** Percent-decoding of a path (a {@code +} stays a plus, as Python's {@code unquote}). */
  private static String decode(String text) {
    return URLDecoder.decode(text.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  /** Percent-decoding of a query (a {@code +} is a space, as Python's {@code parse_qsl}). */
  private static String decodeQuery(String text) {
    return URLDecoder.decode(text, StandardCharsets.UTF_8);
  }

  String pop(String name, String fallback) {
    String value = options.remove(name);
    return value == null ? fallback : value;
  }

  boolean popBool(String name) {
    String text = pop(name, "false").strip().toLowerCase(java.util.Locale.ROOT);
    if (TRUE.contains(text)) {
      return true;
    }
    if (FALSE.contains(text)) {
      return false;
    }
    throw new IllegalArgumentException("not a boolean: " + text);
  }

  /** Fail loudly on options nobody consumed (a typo must not be silently ignored). */
  void rejectUnknown(String what) {
    if (!options.isEmpty()) {
      throw new IllegalArgumentException("unknown " + what + " option(s): " + String.join(", ", new TreeSet<>(options.keySet())));
    }
  }
}
